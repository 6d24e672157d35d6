package grab

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// unpublished counts, per session×prize (by the grab event's key "session:prize", or
// "session:prize:b" for stock bucket b ≥ 1), the admitted grabs this gateway holds whose
// events Kafka has not acknowledged yet: a produce in flight, or an event queued in the
// relay. After Redis loses a prize's keys these grabs exist only here, so the reconciler
// must not rebuild the prize while any gateway holds one (see the reporter and migration
// 0006). A nil *unpublished counts nothing.
//
// An admission call in flight may hold one too: the script may have admitted the grab before
// the keys were lost, its reply still on the way. Such a call started before the reconciler
// saw the keys missing, and store.Unpublished.Quiet trusts only reports stamped at least
// store.AdmissionInDoubt later, so a call counts once it has been in flight that long. A
// younger one cannot hold a grab of a lost prize (it reached Redis after the loss: not
// loaded), and not counting it keeps a crowd retrying its 503s from holding the rebuild off.
type unpublished struct {
	mu        sync.Mutex
	n         map[string]int
	admitting map[uint64]scriptCall // admission calls in flight, by ticket
	ticket    uint64
	inDoubt   time.Duration // a call in flight this long counts as held
	now       func() time.Time
}

type scriptCall struct {
	key   string
	start time.Time
}

func newUnpublished() *unpublished {
	return &unpublished{n: map[string]int{}, admitting: map[uint64]scriptCall{}, inDoubt: store.AdmissionInDoubt, now: time.Now}
}

// admit records an admission call for key about to start (before the script can run) and
// returns its ticket for admitted.
func (u *unpublished) admit(key []byte) uint64 {
	if u == nil {
		return 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ticket++
	u.admitting[u.ticket] = scriptCall{key: string(key), start: u.now()}
	return u.ticket
}

// admitted ends the admission call of ticket; with hold, its grab stays held (as by hold)
// until released, in the same step, so it is never counted out in between.
func (u *unpublished) admitted(ticket uint64, hold bool) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	a, ok := u.admitting[ticket]
	delete(u.admitting, ticket)
	if ok && hold {
		u.n[a.key]++
	}
}

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

// counts returns the non-zero counts by session×prize: grabs held, and admission calls in
// flight for at least inDoubt.
func (u *unpublished) counts() []store.PrizeCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	all := make(map[string]int, len(u.n))
	for k, n := range u.n {
		all[k] += n
	}
	now := u.now()
	for _, a := range u.admitting {
		if now.Sub(a.start) >= u.inDoubt {
			all[a.key]++
		}
	}
	// One row per prize: a stock bucket's grabs (key "session:prize:b") count under their
	// prize, which is what the reconciler's rebuild guard asks about (Quiet), whichever of
	// the prize's buckets lost its keys.
	byPrize := make(map[[2]int64]int, len(all))
	for k, n := range all {
		sid, pid, _, ok := event.ParseGrabKey([]byte(k))
		if !ok {
			continue // keys come from event.BucketPartitionKey; anything else is not a grab
		}
		byPrize[[2]int64{sid, pid}] += n
	}
	out := make([]store.PrizeCount, 0, len(byPrize))
	for k, n := range byPrize {
		out = append(out, store.PrizeCount{SessionID: k[0], PrizeID: k[1], Pending: n})
	}
	return out
}

// UnpublishedReporter is what the heartbeat needs from the store (store.Unpublished).
type UnpublishedReporter interface {
	Report(ctx context.Context, gateway string, sample func() []store.PrizeCount) error
	Leave(ctx context.Context, gateway string) error
}

// reportUnpublished beats this gateway's heartbeat with its unpublished counts every
// interval until ctx ends, then removes the gateway (called once the relay has drained). A
// failed report is logged and retried next tick: the reconciler then sees a stale heartbeat
// at worst, and treats the gateway as gone.
func reportUnpublished(ctx context.Context, st UnpublishedReporter, id string, u *unpublished, every time.Duration, log *slog.Logger) {
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
