package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

// unpublished counts, per session×prize (by the grab event's key "session:prize"), the
// admitted grabs this gateway holds whose events Kafka has not acknowledged yet: a produce
// in flight, or an event queued in the relay. After Redis loses a prize's keys these grabs
// exist only here, so the reconciler must not rebuild the prize while any gateway holds one
// (see the reporter and migration 0006). A nil *unpublished counts nothing.
type unpublished struct {
	mu sync.Mutex
	n  map[string]int
}

func newUnpublished() *unpublished { return &unpublished{n: map[string]int{}} }

func (u *unpublished) hold(key []byte) {
	if u == nil {
		return
	}
	u.mu.Lock()
	u.n[string(key)]++
	u.mu.Unlock()
}

func (u *unpublished) release(key []byte) {
	if u == nil {
		return
	}
	u.mu.Lock()
	if k := string(key); u.n[k] <= 1 {
		delete(u.n, k)
	} else {
		u.n[k]--
	}
	u.mu.Unlock()
}

// counts returns the non-zero counts by session×prize.
func (u *unpublished) counts() []store.PrizeCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]store.PrizeCount, 0, len(u.n))
	for k, n := range u.n {
		s, p, ok := strings.Cut(k, ":")
		sid, err1 := strconv.ParseInt(s, 10, 64)
		pid, err2 := strconv.ParseInt(p, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			continue // keys come from event.PartitionKey; anything else is not a grab
		}
		out = append(out, store.PrizeCount{SessionID: sid, PrizeID: pid, Pending: n})
	}
	return out
}

// unpublishedReporter is what the reporter needs from the store.
type unpublishedReporter interface {
	Report(ctx context.Context, gateway string, sample func() []store.PrizeCount) error
	Leave(ctx context.Context, gateway string) error
}

// gatewayID names this process among the gateways: host, pid and a random part (a restarted
// gateway is a new one; the old one's heartbeat stops).
func gatewayID() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "gateway"
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("gateway id: %w", err)
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b)), nil
}

// reportUnpublished beats this gateway's heartbeat with its unpublished counts every
// interval until ctx ends, then removes the gateway (called once the relay has drained). A
// failed report is logged and retried next tick: the reconciler then sees a stale heartbeat
// at worst, and treats the gateway as gone.
func reportUnpublished(ctx context.Context, st unpublishedReporter, id string, u *unpublished, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		rctx, cancel := context.WithTimeout(ctx, every)
		err := st.Report(rctx, id, u.counts) // sampled after MySQL stamped the beat (see Report)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("reporting unpublished grabs failed; retrying every interval", "gateway", id, "error", err.Error())
			failing = true
		case err == nil && failing:
			log.Info("reporting unpublished grabs works again", "gateway", id)
			failing = false
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := st.Leave(lctx, id); err != nil {
				log.Warn("gateway leave failed; its heartbeat simply stops", "gateway", id, "error", err.Error())
			}
			return
		case <-t.C:
		}
	}
}
