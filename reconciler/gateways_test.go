package main

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// After Redis lost a prize's keys, grabs a live gateway still holds unpublished (a produce
// in flight, its relay waiting for Kafka) exist nowhere else: the rebuild waits until every
// live gateway reported holding none. A gateway whose heartbeat stopped is not waited for;
// what it held is reported as lost.
func TestRebuildWaitsForGatewaysHoldingUnpublishedGrabs(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	un := store.NewUnpublished(e.db)
	// A dead gateway: stopped beating a minute ago with two grabs of the prize unsent.
	if err := un.Report(e.ctx, "gw-dead", func() []store.PrizeCount {
		return []store.PrizeCount{{SessionID: e.session, PrizeID: e.prize, Pending: 2}}
	}); err != nil {
		t.Fatal(err)
	}
	e.db.Exec("UPDATE gateway_heartbeats SET beat_at = NOW(6) - INTERVAL 1 MINUTE WHERE gateway = 'gw-dead'")

	// A live gateway whose relay holds one grab of the prize, beating every 200 ms.
	holding := make(chan int, 1)
	holding <- 1
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go func() {
		n := 1
		for ctx.Err() == nil {
			select {
			case n = <-holding:
			default:
			}
			_ = un.Report(ctx, "gw-live", func() []store.PrizeCount {
				return []store.PrizeCount{{SessionID: e.session, PrizeID: e.prize, Pending: n}}
			})
			time.Sleep(200 * time.Millisecond)
		}
	}()

	e.env["SECKILL_CATCHUP_WAIT"] = "1s"
	rep, err := e.once()
	r := jobOf(rep, "rebuild")
	if err == nil || r.Summary["waiting_for_gateways"] != 1 || r.Summary["rebuilt"] != 0 {
		t.Fatalf("rebuild while a live gateway holds a grab: %v %+v", err, r)
	}
	if r.Summary["lost_with_gateways"] != 2 {
		t.Fatalf("dead gateway's grabs not reported: %+v", r)
	}
	if n, err := e.rdb.Exists(e.ctx, k.Meta).Result(); err != nil || n != 0 {
		t.Fatal("keys rebuilt while a gateway held an unpublished grab")
	}
	holding <- 0 // its relay published; the next report says so
	// A report counts only if stamped store.AdmissionInDoubt after the keys were seen
	// missing: give the run time for one (it returns as soon as the prize is quiet).
	e.env["SECKILL_CATCHUP_WAIT"] = "10s"
	rep, err = e.once()
	if r := jobOf(rep, "rebuild"); err != nil || r.Summary["rebuilt"] != 1 {
		t.Fatalf("rebuild after the gateway drained: %v %+v", err, r)
	}
}

// A gateway that could not reach MySQL for a while (a blip, a failover) stops beating but
// still holds its unpublished grabs: the rebuild keeps waiting for it until its heartbeat is
// SECKILL_GATEWAY_DEAD_AFTER old (default 30 s), and only then reports its grabs as lost.
func TestRebuildWaitsForAGatewaySilentLessThanDeadAfter(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	k := stock.KeysFor(e.session, e.prize)
	e.rdb.Del(e.ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	un := store.NewUnpublished(e.db)
	if err := un.Report(e.ctx, "gw-blip", func() []store.PrizeCount {
		return []store.PrizeCount{{SessionID: e.session, PrizeID: e.prize, Pending: 1}}
	}); err != nil {
		t.Fatal(err)
	}
	// Its last beat is 10 s old: MySQL was out of its reach since.
	if err := e.db.Exec("UPDATE gateway_heartbeats SET beat_at = NOW(6) - INTERVAL 10 SECOND WHERE gateway = 'gw-blip'").Error; err != nil {
		t.Fatal(err)
	}
	e.env["SECKILL_CATCHUP_WAIT"] = "1s"
	rep, err := e.once()
	r := jobOf(rep, "rebuild")
	if err == nil || r.Summary["waiting_for_gateways"] != 1 || r.Summary["rebuilt"] != 0 || r.Summary["lost_with_gateways"] != 0 {
		t.Fatalf("rebuild with a gateway silent for 10 s and the default SECKILL_GATEWAY_DEAD_AFTER: %v %+v", err, r)
	}
	if n, err := e.rdb.Exists(e.ctx, k.Meta).Result(); err != nil || n != 0 {
		t.Fatal("keys rebuilt while a gateway silent for less than SECKILL_GATEWAY_DEAD_AFTER held an unpublished grab")
	}
	e.env["SECKILL_GATEWAY_DEAD_AFTER"] = "5s"
	rep, err = e.once()
	if r := jobOf(rep, "rebuild"); err != nil || r.Summary["rebuilt"] != 1 || r.Summary["lost_with_gateways"] != 1 {
		t.Fatalf("rebuild once the silence exceeds SECKILL_GATEWAY_DEAD_AFTER=5s: %v %+v", err, r)
	}
}
