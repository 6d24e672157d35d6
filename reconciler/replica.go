package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// replicaStatus is what the gauges need from a replica's SHOW SLAVE STATUS and the
// writer's semi-sync status.
type replicaStatus struct {
	Replicating bool  // SHOW SLAVE STATUS has a row: the server is configured as a replica
	IORunning   bool  // Slave_IO_Running = Yes
	SQLRunning  bool  // Slave_SQL_Running = Yes
	Lag         int64 // Seconds_Behind_Master; -1 when NULL (a thread stopped)
	SemiSync    bool  // the writer's Rpl_semi_sync_master_status = ON
}

// replicaGauges exports the replication of the configured replica (SECKILL_MYSQL_REPLICA_DSN)
// and the writer's semi-sync state. Read-only, so every instance exports them, outside the
// lease. The pipeline never reads from the replica; these are for the failover's sake: a
// replica that lags or stopped, or a primary that fell back to asynchronous replication,
// is a failover that would lose or delay commits.
type replicaGauges struct {
	read  func(ctx context.Context) (replicaStatus, error)
	every time.Duration
	log   *slog.Logger

	lag, running, semiSync prometheus.Gauge
}

func newReplicaGauges(reg prometheus.Registerer, read func(context.Context) (replicaStatus, error), every time.Duration, log *slog.Logger) *replicaGauges {
	g := &replicaGauges{read: read, every: every, log: log,
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_replica_lag_seconds",
			Help: "Seconds_Behind_Master of the replica SECKILL_MYSQL_REPLICA_DSN names; -1 while it cannot say (a replication thread stopped, or not a replica)."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_replica_running",
			Help: "1 while that replica's I/O and SQL threads both run, else 0 (stopped, broken, or the server is not a replica: after a failover it may be the primary)."}),
		semiSync: prometheus.NewGauge(prometheus.GaugeOpts{Name: "seckill_mysql_semi_sync_active",
			Help: "1 while the writer waits for a replica's acknowledgement before a commit returns (Rpl_semi_sync_master_status ON); 0 after rpl_semi_sync_master_timeout made it asynchronous."}),
	}
	reg.MustRegister(g.lag, g.running, g.semiSync)
	return g
}

func (g *replicaGauges) Run(ctx context.Context) error {
	sampleEvery(ctx, g.every, g.sample, func(err error) {
		g.log.Warn("replica gauges unreadable", "error", err.Error())
	})
	return nil
}

func (g *replicaGauges) sample(ctx context.Context) error {
	st, err := g.read(ctx)
	if err != nil {
		return err
	}
	g.lag.Set(float64(st.Lag))
	g.running.Set(boolGauge(st.Replicating && st.IORunning && st.SQLRunning))
	g.semiSync.Set(boolGauge(st.SemiSync))
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readReplication reads SHOW SLAVE STATUS on replica and the semi-sync status on writer.
func readReplication(ctx context.Context, writer, replica *sql.DB) (replicaStatus, error) {
	st := replicaStatus{Lag: -1}
	var name, value string
	switch err := writer.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'").Scan(&name, &value); err {
	case nil:
		st.SemiSync = value == "ON"
	case sql.ErrNoRows: // a server without semi-sync: never on
	default:
		return st, fmt.Errorf("semi-sync status of the writer: %w", err)
	}
	fields, err := slaveStatus(ctx, replica)
	if err != nil {
		return st, err
	}
	if fields == nil {
		return st, nil
	}
	st.Replicating = true
	st.IORunning = fields["Slave_IO_Running"] == "Yes"
	st.SQLRunning = fields["Slave_SQL_Running"] == "Yes"
	if v, ok := fields["Seconds_Behind_Master"]; ok && v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			st.Lag = n
		}
	}
	return st, nil
}

// slaveStatus returns SHOW SLAVE STATUS's first row by column name (NULL as ""), or nil
// when the server is not a replica.
func slaveStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, fmt.Errorf("show slave status: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if !rows.Next() {
		return nil, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, fmt.Errorf("show slave status: %w", err)
	}
	out := make(map[string]string, len(cols))
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}
