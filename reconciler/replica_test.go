package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

func TestReplicaGauges(t *testing.T) {
	tests := []struct {
		name                   string
		st                     replicaStatus
		lag, running, semiSync float64
	}{
		{"replicating, in sync", replicaStatus{Replicating: true, IORunning: true, SQLRunning: true, Lag: 0, SemiSync: true}, 0, 1, 1},
		{"lagging", replicaStatus{Replicating: true, IORunning: true, SQLRunning: true, Lag: 42, SemiSync: true}, 42, 1, 1},
		{"SQL thread stopped", replicaStatus{Replicating: true, IORunning: true, Lag: -1, SemiSync: true}, -1, 0, 1},
		{"I/O thread stopped, primary asynchronous", replicaStatus{Replicating: true, SQLRunning: true, Lag: -1}, -1, 0, 0},
		{"not a replica (promoted in a failover)", replicaStatus{Lag: -1}, -1, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newReplicaGauges(prometheus.NewRegistry(), func(context.Context) (replicaStatus, error) { return tc.st, nil },
				time.Second, slog.New(slog.DiscardHandler))
			if err := g.sample(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(g.lag); got != tc.lag {
				t.Errorf("lag %v, want %v", got, tc.lag)
			}
			if got := testutil.ToFloat64(g.running); got != tc.running {
				t.Errorf("running %v, want %v", got, tc.running)
			}
			if got := testutil.ToFloat64(g.semiSync); got != tc.semiSync {
				t.Errorf("semi-sync %v, want %v", got, tc.semiSync)
			}
		})
	}
	// An unreadable replica leaves the last values and says so (the sampler logs it).
	g := newReplicaGauges(prometheus.NewRegistry(), func(context.Context) (replicaStatus, error) {
		return replicaStatus{}, errors.New("dial tcp: connection refused")
	}, time.Second, slog.New(slog.DiscardHandler))
	if err := g.sample(context.Background()); err == nil {
		t.Fatal("an unreadable replica sampled without an error")
	}
}

// TestReadReplicationFromARealServer reads SHOW SLAVE STATUS from a MariaDB of the test's
// own: no row while it is no replica, then the row of a replica configured but not started
// (both threads stopped, Seconds_Behind_Master NULL).
func TestReadReplicationFromARealServer(t *testing.T) {
	srv := stacktest.PrivateMariaDB(t)
	ctx := stacktest.Context(t, 30*time.Second)
	st, err := readReplication(ctx, srv.Root, srv.Root)
	if err != nil {
		t.Fatal(err)
	}
	if st != (replicaStatus{Lag: -1}) {
		t.Fatalf("not a replica: %+v, want only lag -1", st)
	}
	if _, err := srv.Root.ExecContext(ctx, "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 9, MASTER_USER = 'nobody', MASTER_USE_GTID = slave_pos"); err != nil {
		t.Fatal(err)
	}
	st, err = readReplication(ctx, srv.Root, srv.Root)
	if err != nil {
		t.Fatal(err)
	}
	if st != (replicaStatus{Replicating: true, Lag: -1}) {
		t.Fatalf("configured, not started: %+v, want a replica with both threads stopped and lag -1", st)
	}
}
