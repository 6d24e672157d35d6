package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cluster profile's scenarios fault the nodes of `deploy/local/stack --profile cluster`
// under the services of `make run PROFILE=cluster`, whose reconcilers export the gauges these
// alerts read: the Kafka metadata (brokers down, partitions under-replicated or below
// min.insync.replicas) and the MariaDB replica that SECKILL_MYSQL_REPLICA_DSN names (its
// threads and lag, and the primary's semi-sync state). Brokers are stopped and started with
// the stack script's node commands; the replica is driven as root over its own socket, as
// the stack script does. Each undo is verified: the scenario's healthy expression (the same
// gauges) holds again and its alerts have resolved before the next scenario starts.
var clusterScenarios = []scenario{
	{name: "broker-down", profile: cluster, alerts: []string{"SeckillKafkaBrokerDown", "SeckillKafkaUnderReplicated"},
		watch: `max(seckill_reconciler_kafka_brokers_down)`, start: (*drill).brokerDown, healthy: kafkaHealthy,
		timeout: 8 * time.Minute}, // UnderReplicated waits 5 minutes
	{name: "below-min-isr", profile: cluster, alerts: []string{"SeckillKafkaBelowMinISR"},
		watch: `max(seckill_reconciler_kafka_partitions_below_min_isr)`, start: (*drill).belowMinISR, healthy: kafkaHealthy},
	{name: "replica-stopped", profile: cluster, alerts: []string{"SeckillMySQLReplicaNotReplicating"},
		watch: `max(seckill_mysql_replica_running)`, start: (*drill).replicaStopped, healthy: replicaHealthy},
	{name: "replica-lag", profile: cluster, alerts: []string{"SeckillMySQLReplicaLagging"},
		watch: `max(seckill_mysql_replica_lag_seconds)`, start: (*drill).replicaLag, healthy: replicaHealthy},
	{name: "semisync-off", profile: cluster, alerts: []string{"SeckillMySQLSemiSyncOff"},
		watch: `max(seckill_mysql_semi_sync_active)`, start: (*drill).semiSyncOff, healthy: replicaHealthy},
}

const (
	// Every broker alive and every partition of the pipeline's topics fully in sync.
	kafkaHealthy = `max(seckill_reconciler_kafka_brokers_down) == 0` +
		` and max(seckill_reconciler_kafka_partitions_under_replicated) == 0` +
		` and max(seckill_reconciler_kafka_partitions_below_min_isr) == 0`
	// The replica's threads running and caught up, the primary waiting for it again.
	replicaHealthy = `min(seckill_mysql_replica_running) == 1` +
		` and max(seckill_mysql_replica_lag_seconds) < 5` +
		` and min(seckill_mysql_semi_sync_active) == 1`
)

// replicaDelay is the replica-lag scenario's MASTER_DELAY: twice the alert's 30 s, so the
// lag stays above the threshold between one grab's commit and the next.
const replicaDelay = 60 * time.Second

// crowdRate is the grabs a second of the MySQL scenarios' crowd: enough commits on the
// primary that the replica always has something to receive and apply.
const crowdRate = 10

// clusterStack checks that the drill talks to the cluster profile's stack.
func (d *drill) clusterStack() error {
	if len(d.common.KafkaBrokers) < 3 {
		return fmt.Errorf("the cluster scenarios act on the cluster profile's stack; SECKILL_KAFKA_BROKERS names %d brokers (load .state/cluster/env)", len(d.common.KafkaBrokers))
	}
	if _, err := os.Stat(filepath.Join(d.state, "cluster", "env")); err != nil {
		return fmt.Errorf("no cluster stack in %s (SECKILL_STATE_DIR): %w", d.state, err)
	}
	return nil
}

// node runs `deploy/local/stack CMD NODE --profile cluster` (stop waits until the node is
// gone, start until it answers), its output shown.
func (d *drill) node(ctx context.Context, cmd, node string) error {
	c := exec.CommandContext(ctx, d.stack, cmd, node, "--profile", cluster)
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s %s --profile cluster: %w", d.stack, cmd, node, err)
	}
	return nil
}

// brokersStopped stops the nodes in order (SIGTERM: each a controlled shutdown, so the
// controller quorum, still alive while it runs, takes the broker out of the partitions' ISRs
// and records it) and returns what starts them again, the last stopped first.
func (d *drill) brokersStopped(ctx context.Context, nodes ...string) (func(), error) {
	if err := d.clusterStack(); err != nil {
		return nil, err
	}
	start := func(stopped []string) {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for i := len(stopped) - 1; i >= 0; i-- {
			if err := d.node(rctx, "start", stopped[i]); err != nil {
				fmt.Printf("  COULD NOT START %s AGAIN (%v): run %s start %s --profile cluster\n", stopped[i], err, d.stack, stopped[i])
				continue
			}
			fmt.Printf("  %s started again\n", stopped[i])
		}
	}
	for i, n := range nodes {
		if err := d.node(ctx, "stop", n); err != nil {
			start(nodes[:i+1]) // what stopped (and a node half-stopped) comes back
			return nil, err
		}
		fmt.Printf("  %s stopped\n", n)
	}
	return func() { start(nodes) }, nil
}

// brokerDown: one broker of three stopped. Writes go on (two replicas in sync is
// min.insync.replicas); every partition that had a replica on it is under-replicated.
func (d *drill) brokerDown(ctx context.Context) (func(), error) {
	return d.brokersStopped(ctx, "kafka-3")
}

// belowMinISR: two brokers of three stopped, one after the other: every partition is left
// with one in-sync replica, below min.insync.replicas 2, and refuses acks=all writes
// (admitted grabs wait in the gateways' relays). The second stop also takes the
// KRaft quorum below its majority; the metadata the survivor serves is the one recorded
// while the second broker shut down.
func (d *drill) belowMinISR(ctx context.Context) (func(), error) {
	return d.brokersStopped(ctx, "kafka-3", "kafka-2")
}

// replicaNode is the MariaDB node that is not the recorded primary (the stack's
// mariadb-primary file, 1 until a failover moves it).
func (d *drill) replicaNode() (int, error) {
	primary := 1
	if b, err := os.ReadFile(filepath.Join(d.state, "cluster", "mariadb-primary")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		p, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || (p != 1 && p != 2) {
			return 0, fmt.Errorf("%s/cluster/mariadb-primary holds %q", d.state, b)
		}
		primary = p
	}
	return 3 - primary, nil
}

// replicaSQL runs statements as root on the replica's own socket.
func (d *drill) replicaSQL(ctx context.Context, sql string) error {
	if err := d.clusterStack(); err != nil {
		return err
	}
	r, err := d.replicaNode()
	if err != nil {
		return err
	}
	sock := filepath.Join(d.state, "cluster", fmt.Sprintf("mariadb-%d", r), "mysqld.sock")
	out, err := exec.CommandContext(ctx, "mariadb", "--no-defaults", "-uroot", "-S", sock, "-e", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mariadb-%d: mariadb -e %q: %w: %s", r, sql, err, strings.TrimSpace(string(out)))
	}
	fmt.Printf("  mariadb-%d (the replica): %s\n", r, sql)
	return nil
}

// replicaFault runs fault on the replica, with a crowd of grabs making the primary commit
// orders meanwhile when writes is set; the stop ends the crowd and runs undo.
func (d *drill) replicaFault(ctx context.Context, name, fault, undo string, writes bool) (func(), error) {
	stopCrowd := func() {}
	if writes {
		session, prize, err := d.sale(ctx, "firedrill: "+name, 1_000_000)
		if err != nil {
			return nil, err
		}
		stopCrowd = d.crowd(context.WithoutCancel(ctx), session, prize, crowdRate, 0)
	}
	if err := d.replicaSQL(ctx, fault); err != nil {
		stopCrowd()
		return nil, err
	}
	return func() {
		stopCrowd()
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.replicaSQL(rctx, undo); err != nil {
			fmt.Println("  COULD NOT UNDO:", err)
		}
	}, nil
}

// replicaStopped: the replica's SQL thread stopped. Its I/O thread goes on receiving and
// acknowledging (semi-sync stays on), but nothing is applied.
func (d *drill) replicaStopped(ctx context.Context) (func(), error) {
	return d.replicaFault(ctx, "replica SQL thread stopped", "STOP SLAVE SQL_THREAD", "START SLAVE SQL_THREAD", false)
}

// replicaLag: the replica applies each event only replicaDelay after the primary wrote it
// (CHANGE MASTER TO MASTER_DELAY, which needs the replica's threads stopped for a moment),
// while a crowd keeps the primary committing: its Seconds_Behind_Master is the age of the
// event it waits on, about replicaDelay. Both threads run meanwhile, and the I/O thread still
// acknowledges at once: only the lag moves.
func (d *drill) replicaLag(ctx context.Context) (func(), error) {
	delay := int(replicaDelay.Seconds())
	return d.replicaFault(ctx, "replica applies late",
		fmt.Sprintf("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = %d; START SLAVE", delay),
		"STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 0; START SLAVE", true)
}

// semiSyncOff: the replica's I/O thread stopped while a crowd makes the primary commit: the
// first commit waits rpl_semi_sync_master_timeout for an acknowledgement nobody sends, and
// the primary falls back to asynchronous replication until the replica, started again, has
// caught up. (SeckillMySQLReplicaNotReplicating would follow after its two minutes.)
func (d *drill) semiSyncOff(ctx context.Context) (func(), error) {
	return d.replicaFault(ctx, "replica I/O thread stopped", "STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD", true)
}
