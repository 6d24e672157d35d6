package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/seckill-pipeline/seckill/internal/adminclient"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Entering a draw at the open (package draw): the same crowd as the open's rows, every
// request a new user, at the same rate, against a draw prize whose entry window spans the
// whole attack. Each grab is then an entry (one Redis script, no Kafka write), so the rows
// say how many entries per second the gateway takes at the open, beside the grab path's
// closed-loop maximum: the bar is entries/s ≥ that maximum. After the attack the
// row waits for the reconciler's draw and checks it: the frozen set holds exactly the users
// answered 202 entered, the stock's worth of them were admitted and every one is an order.

func keyOpenDraw(label string) string { return "open_draw_" + label }

// drawWait bounds the wait for the reconciler's draw (its run every SECKILL_RECONCILE_INTERVAL,
// 10 s shipped) and the winners' orders.
const drawWait = 2 * time.Minute

// drawRow measures entering a draw at r's rate. triv is the trivial handler's row at the
// same rate in this repetition (the p99 comparison).
func (b *bench) drawRow(ctx context.Context, env *openEnv, r openRate, closedMax float64, triv *sample, k *broken) ([]measured, error) {
	spec := attackSpec{rate: r.rate, duration: openDuration, conns: env.conns, pin: b.pinGenerator}
	tok, err := env.users(spec.targets())
	if err != nil {
		return nil, err
	}
	spec.tokens = tok
	at := fmt.Sprintf("entering a draw at %s (%d/s)", r.name, r.rate)
	feedTime := 2*time.Second + time.Duration(float64(spec.targets())/50_000*float64(time.Second))
	open := time.Now().Add(openLead + feedTime).Truncate(time.Second).Add(time.Second)
	window := time.Duration(math.Ceil(openDuration.Seconds())) * time.Second // the whole attack after the open
	created, err := env.admin.CreateSale(ctx, fmt.Sprintf("open bench draw %s %d/s", r.name, r.rate), open, openSession,
		[]adminclient.Prize{{Name: "hot draw", Stock: r.stock, Admission: string(seckill.AdmissionDraw), EntryWindow: window.String()}})
	if err != nil {
		return nil, fmt.Errorf("create the draw sale: %w", err)
	}
	sale := seckill.SessionPrize{Session: created.Session, Prize: created.Prizes[0]}
	env.sales = append(env.sales, sale)
	spec.url, spec.startAt, spec.keyPrefix = grabURL(env.c.GatewayAddr, sale.Session, sale.Prize), open.Add(-openLead), ""
	spec.procs, spec.rssPid = env.procs, env.c.Gateway.Pid()
	res, err := b.attack(ctx, spec)
	if err != nil {
		return nil, err
	}
	f := figuresOf(res.answers, spec.rate, open)
	s := sampleOf(f)
	s.Extra["gateway_peak_rss_mb"] = res.peakRSSMB
	s.Extra["cpu_s_generator"] = res.generator.Seconds()
	s.Extra["connections"], s.Extra["stock"] = spec.conns, r.stock
	entries := f.mix[kindAdmitted]
	s.Extra["entries"] = entries
	after, err := cpuTimes(env.procs)
	if err != nil {
		return nil, err
	}
	cpu := processCPU(env.procs, res.before, after)
	for name, v := range cpu {
		s.Extra[name] = v
	}
	if entries > 0 {
		s.Extra["cpu_us_per_entry_gateway"] = cpu["cpu_s_gateway"] * 1e6 / float64(entries)
	}
	s.Ratios = map[string]float64{}
	if closedMax > 0 {
		s.Ratios["entries_over_closed_max"] = f.goodputPS / closedMax
	}
	if triv != nil && triv.P99ms > 0 {
		s.Ratios["p99_over_trivial"] = s.P99ms / triv.P99ms
	}
	b.logf("  draw entries %d/s (open %.2fs after the attack started): achieved %.0f/s, entries %.0f/s (%d), p50 %.1f ms, p99 %.1f ms, max %.0f ms; %s; gateway CPU %.2f s",
		spec.rate, f.openAfterStartS, f.achievedPS, f.goodputPS, entries, f.all.p50, f.all.p99, f.all.max, mixLine(f.mix), cpu["cpu_s_gateway"])
	k.add(at, answerCheck(f, res.targets))
	k.add(at, b.checkDraw(ctx, env, sale, int64(entries), int64(r.stock), s))
	return []measured{{keyOpenDraw(r.label), fmt.Sprintf("open at %s: entering a draw, %d/s for %s (the window opens after %s and spans the attack), stock %d, %d connections",
		r.name, r.rate, openDuration, openLead, r.stock, env.conns), s}}, nil
}

// checkDraw waits for the reconciler's draw of sale and checks it against what the crowd
// was answered: every user answered 202 entered is in the frozen set and no other, the
// stock's worth of entrants (or every entrant) was admitted, and each admission is an order.
func (b *bench) checkDraw(ctx context.Context, env *openEnv, sale seckill.SessionPrize, entries, stock int64, s *sample) error {
	cl := draw.Client{Base: "http://" + env.c.GatewayAddr, HTTP: b.client}
	want := min(entries, stock)
	start := time.Now()
	var rec draw.Record
	for {
		var err error
		if rec, err = cl.Record(ctx, sale.Session, sale.Prize); err != nil {
			return err
		}
		if rec.Phase == draw.PhaseDrawn && int64(rec.Cutoff) >= want {
			break
		}
		if time.Since(start) > drawWait {
			return fmt.Errorf("the draw is %s with cutoff %d %s after the attack, want drawn with cutoff %d", rec.Phase, rec.Cutoff, drawWait, want)
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	s.Extra["draw_done_s"] = time.Since(start).Seconds()
	if int64(rec.Entries) != entries {
		return fmt.Errorf("the frozen set holds %d entries; %d users were answered 202 entered", rec.Entries, entries)
	}
	admitted, orders, err := b.waitOrders(ctx, env.c, sale, drawWait)
	if err != nil {
		return err
	}
	s.Extra["admitted"], s.Extra["orders"] = admitted, orders
	s.Oversold = max(0, admitted-stock)
	switch {
	case admitted != want:
		return fmt.Errorf("the draw admitted %d winners, want %d (stock %d, entries %d)", admitted, want, stock, entries)
	case orders != admitted:
		return fmt.Errorf("%d winners admitted, %d orders", admitted, orders)
	}
	b.logf("  draw: %d entries frozen, %d winners admitted and persisted %.1fs after the attack", rec.Entries, admitted, time.Since(start).Seconds())
	return nil
}
