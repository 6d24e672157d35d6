package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// sessionLister is what finding the session×prizes in play needs from the catalog.
type sessionLister interface {
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
}

// lagReader reads a consumer group's lag per partition from its committed offsets.
type lagReader interface {
	Lag(ctx context.Context, group string, t event.Topic) (map[int]int64, error)
}

// grabLag answers "could events of this session×prize still be on their way to MySQL?"
// from the order consumers' lag on the prize's grab partition. The payment job reads the
// feedback group's lag through it too (group and topic are the feedback's; a report's
// partition comes from its request id: pendingKey).
type grabLag struct {
	reader lagReader
	group  string
	topic  event.Topic
}

// inFlight is one reading of the grab topic's lag.
type inFlight struct {
	lag        map[int]int64
	partitions int
}

func (g grabLag) read(ctx context.Context) (inFlight, error) {
	lag, err := g.reader.Lag(ctx, g.group, g.topic)
	if err != nil {
		return inFlight{}, fmt.Errorf("consumer lag: %w", err)
	}
	return inFlight{lag: lag, partitions: g.topic.Partitions}, nil
}

func (f inFlight) pending(sessionID, prizeID int64) int64 {
	return f.pendingKey(event.PartitionKey(sessionID, prizeID))
}

// pendingPrize is the lag of every partition a scope's grabs land on: each stock bucket's
// (docs/design.md: bucket b >= 1 is keyed session:prize:b), or the prize's.
func (f inFlight) pendingPrize(s scope) int64 {
	n := f.pending(s.stock.SessionID, s.stock.PrizeID)
	for b := 1; b < s.buckets; b++ {
		n += f.pendingKey(event.BucketPartitionKey(s.stock.SessionID, s.stock.PrizeID, b))
	}
	return n
}

// sessionIDs are the sessions of scopes, each once.
func sessionIDs(sc []scope) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, s := range sc {
		if !seen[s.stock.SessionID] {
			seen[s.stock.SessionID] = true
			out = append(out, s.stock.SessionID)
		}
	}
	return out
}

// pendingKey is the lag of the partition the messages keyed key land on.
func (f inFlight) pendingKey(key []byte) int64 {
	return f.lag[event.PartitionOf(key, f.partitions)]
}

// waitCaughtUp polls the lag until every given prize's partition is at 0 or wait passes,
// and returns the prizes that caught up.
func (g grabLag) waitCaughtUp(ctx context.Context, prizes []scope, wait time.Duration) ([]scope, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := g.read(ctx)
		if err != nil {
			return nil, err
		}
		var ready []scope
		for _, s := range prizes {
			if f.pendingPrize(s) == 0 {
				ready = append(ready, s)
			}
		}
		if len(ready) == len(prizes) || time.Now().After(deadline) {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scope is what the drift, stale and rebuild jobs look at: the session×prizes of sessions
// that have started and ended no longer than grace ago.
type scope struct {
	session seckill.Session
	stock   seckill.Stock
	// Of a prize with stock buckets (set by the rebuild job): N, and the buckets whose keys
	// are lost.
	buckets int
	lost    []int
}

func activeScope(ctx context.Context, c sessionLister, now time.Time, grace time.Duration) ([]scope, error) {
	sessions, err := c.SessionsOverlapping(ctx, now.Add(-grace), now.Add(time.Nanosecond))
	if err != nil {
		return nil, err
	}
	byID := map[int64]seckill.Session{}
	var ids []int64
	for _, s := range sessions {
		if !now.Before(s.Start) {
			byID[s.ID] = s
			ids = append(ids, s.ID)
		}
	}
	stocks, err := c.Stocks(ctx, ids...)
	if err != nil {
		return nil, err
	}
	out := make([]scope, len(stocks))
	for i, st := range stocks {
		out[i] = scope{session: byID[st.SessionID], stock: st}
	}
	return out, nil
}

// settleOf turns stored orders into the gate's settlements, each under the order's owner.
func settleOf(sessionID, prizeID int64, orders []seckill.Order) stock.SettleBatch {
	b := stock.SettleBatch{SessionID: sessionID, PrizeID: prizeID}
	for _, o := range orders {
		b.Items = append(b.Items, stock.SettlementOf(o))
	}
	return b
}
