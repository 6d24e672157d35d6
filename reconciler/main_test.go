package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	leasepkg "github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestReconcilerStartsAndStops(t *testing.T) {
	stacktest.Redis(t)
	dsn, _ := stacktest.Migrated(t)
	addr := stacktest.FreeAddr(t)
	getenv := stacktest.Getenv(map[string]string{"SECKILL_RECONCILER_ADDR": addr, "SECKILL_MYSQL_DSN": dsn,
		"SECKILL_RECONCILER_LEASE": "t-" + stacktest.ID(t)})
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, getenv, &out, io.Discard) }()
	stacktest.WaitHTTP(t, "http://"+addr+"/healthz", 20*time.Second)
	stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v; log:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reconciler did not stop within 20s")
	}
}

func TestOncePreheatsDueSessionsAndOneActs(t *testing.T) {
	dsn, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	ctx := stacktest.Context(t, 60*time.Second)
	cat := store.NewCatalog(db, time.Now)
	start := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	act, err := cat.CreateActivity(ctx, seckill.Activity{
		Name: "soon", WindowStart: start, WindowEnd: start.Add(time.Hour), Interval: 30 * time.Minute,
		SessionLength: 5 * time.Minute, PerUserLimit: 1,
		Prizes: []seckill.Prize{{Name: "a", StockPerSession: 3}, {Name: "b", StockPerSession: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions, _ := cat.Sessions(ctx, act.ID)
	getenv := stacktest.Getenv(map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_PREHEAT_LEAD": "5m",
		"SECKILL_RECONCILER_LEASE": "t-" + stacktest.ID(t)})

	var out bytes.Buffer
	if err := run(ctx, []string{"--once", "--json"}, getenv, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	if rep.Lease != "held" || len(rep.Jobs) == 0 || jobOf(rep, "preheat").Summary["keys_loaded"] != 2 {
		t.Fatalf("report %+v", rep)
	}
	// Only the first session is due; the second starts in 32 minutes.
	if n, err := rdb.Exists(ctx, stock.KeysFor(sessions[0].ID, act.Prizes[0].ID).Meta).Result(); err != nil || n != 1 {
		t.Fatal("first session not preheated")
	}
	if n, err := rdb.Exists(ctx, stock.KeysFor(sessions[1].ID, act.Prizes[0].ID).Meta).Result(); err != nil || n != 0 {
		t.Fatal("second session preheated 30 minutes early")
	}
	out.Reset()
	if err := run(ctx, []string{"--once"}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "keys_kept=2") || !strings.Contains(out.String(), "keys_loaded=0") {
		t.Fatalf("second run should keep both keys:\n%s", out.String())
	}
}

func TestOnceBusyLeaseActsNot(t *testing.T) {
	dsn, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	// Hold the lease as another instance would.
	name := "t-" + stacktest.ID(t)
	l := leasepkg.New(db, name, 10*time.Second)
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	defer l.Release(ctx, h)
	var out bytes.Buffer
	if err := run(ctx, []string{"--once"}, stacktest.Getenv(map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_RECONCILER_LEASE": name}), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "lease busy") {
		t.Fatalf("second reconciler acted while the lease was held:\n%s", out.String())
	}
}
