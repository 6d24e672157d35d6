// Package preheat loads a session's stock from MySQL into the Redis gate before the session
// opens, on demand (admin API) or on a schedule (reconciler), and changes it in both before
// the session opens (stock adjustment): the two paths that race on a key not yet opened.
package preheat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// ErrStarted is returned for a session that has already opened. While a session is open the
// database lags Redis by the events in flight, so loading from it could hand out stock twice;
// missing keys of an open session are rebuilt by the reconciler once consumers caught up.
var ErrStarted = errors.New("session already started; the reconciler rebuilds missing keys of open sessions")

type catalog interface {
	Session(ctx context.Context, id int64) (seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	AdjustStock(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string, mirror store.StockMirror) (before, after seckill.Stock, err error)
	Buckets(ctx context.Context, sessionID, prizeID int64) ([]store.Bucket, error)
	Ledger(ctx context.Context, sessionID, prizeID int64, n int) ([]seckill.BucketLedger, error)
}

type gate interface {
	Load(ctx context.Context, stocks []seckill.Stock, expireAt time.Time) ([]stock.LoadResult, error)
	Adjust(ctx context.Context, st seckill.Stock, expireAt time.Time) (bool, error)
	UndoAdjust(ctx context.Context, undone, restore seckill.Stock) error
	LoadBucket(ctx context.Context, st seckill.Stock, b, buckets int, ledger seckill.BucketLedger, expireAt time.Time) (stock.LoadResult, error)
}

// armer commits the draws of a session's draw prizes and marks their keys (*draw.Armer).
type armer interface {
	Arm(ctx context.Context, s seckill.Session) (int, error)
}

// Preheater loads sessions' stock into the gate.
type Preheater struct {
	catalog catalog
	gate    gate
	draws   armer         // nil: no prize is a draw's
	grace   time.Duration // keys live until session end + grace
	now     func() time.Time
	retry   []time.Duration // waits before re-reading a row a newer adjustment superseded
}

// New returns a Preheater. grace is how long keys outlive their session, for late status
// polls and for the consumer and reconciler to settle the last reservations.
func New(c catalog, g gate, grace time.Duration, now func() time.Time) *Preheater {
	return &Preheater{catalog: c, gate: g, grace: grace, now: now,
		retry: []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}}
}

// WithDraws makes the preheat commit and arm the draws of draw prizes (package draw) after
// loading their stock.
func (p *Preheater) WithDraws(a armer) *Preheater {
	p.draws = a
	return p
}

// Result says what one preheat did.
type Result struct {
	SessionID int64   `json:"session_id"`
	Loaded    []int64 `json:"loaded"` // prizes whose keys were created
	Kept      []int64 `json:"kept"`   // prizes whose keys existed and were left alone
	// Draws is how many of the session's prizes are given by a draw: each has its committed
	// record (the seed's SHA-256 public from now on) and its keys armed for entries.
	Draws    int    `json:"draws"`
	ExpireAt string `json:"expire_at"`
}

// Session preheats one session that has not started.
func (p *Preheater) Session(ctx context.Context, id int64) (Result, error) {
	s, err := p.catalog.Session(ctx, id)
	if err != nil {
		return Result{}, err
	}
	return p.load(ctx, s)
}

func (p *Preheater) load(ctx context.Context, s seckill.Session) (Result, error) {
	if !p.now().Before(s.Start) {
		return Result{}, fmt.Errorf("preheat session %d: %w", s.ID, ErrStarted)
	}
	expire := s.End.Add(p.grace)
	loaded := map[int64]bool{}
	for attempt := 0; ; attempt++ {
		stocks, err := p.catalog.Stocks(ctx, s.ID)
		if err != nil {
			return Result{}, err
		}
		res, err := p.loadStocks(ctx, stocks, expire)
		if err != nil {
			return Result{}, fmt.Errorf("preheat session %d: %w", s.ID, err)
		}
		var stale []int64
		for _, r := range res {
			loaded[r.PrizeID] = loaded[r.PrizeID] || r.Loaded
			if r.Stale {
				stale = append(stale, r.PrizeID)
			}
		}
		if len(stale) == 0 {
			out := p.result(s.ID, res, loaded, expire)
			if p.draws != nil {
				// After the load (arming needs the keys) and before the open: the window starts
				// at the session's start, and until armed an entry is answered "not loaded".
				if out.Draws, err = p.draws.Arm(ctx, s); err != nil {
					return Result{}, fmt.Errorf("preheat session %d: draws: %w", s.ID, err)
				}
			}
			return out, nil
		}
		// An adjustment reached Redis after this read. Its transaction commits right after
		// its Redis step, so reading again shortly sees the new row. Prizes loaded in this
		// round are kept by the next one, and still reported as loaded.
		if attempt == len(p.retry) {
			return Result{}, fmt.Errorf("preheat session %d: prizes %v: stock adjusted while preheating and not yet readable: %w",
				s.ID, stale, seckill.ErrConflict)
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("preheat session %d: %w", s.ID, ctx.Err())
		case <-time.After(p.retry[attempt]):
		}
	}
}

// loadStocks loads a session's prizes: those without buckets in one Gate.Load, exactly as
// before buckets existed, and each bucket of the others from its row with its journal's
// ledger (Gate.LoadBucket). The results are in the order of stocks, one per prize: a
// bucketed prize is loaded when any of its buckets was, stale when any was.
func (p *Preheater) loadStocks(ctx context.Context, stocks []seckill.Stock, expire time.Time) ([]stock.LoadResult, error) {
	plain := make([]seckill.Stock, 0, len(stocks))
	for _, st := range stocks {
		if st.Buckets <= 1 {
			plain = append(plain, st)
		}
	}
	res, err := p.gate.Load(ctx, plain, expire)
	if err != nil {
		return nil, err
	}
	if len(plain) == len(stocks) {
		return res, nil
	}
	out := make([]stock.LoadResult, 0, len(stocks))
	for _, st := range stocks {
		if st.Buckets <= 1 {
			out, res = append(out, res[0]), res[1:]
			continue
		}
		r, err := p.loadBuckets(ctx, st, expire)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// loadBuckets loads every bucket of one session×prize. The rows are read after the
// prize's row (st), so a bucket row newer than what st saw is only newer: each bucket's own
// revision check refuses a row older than what Redis holds.
func (p *Preheater) loadBuckets(ctx context.Context, st seckill.Stock, expire time.Time) (stock.LoadResult, error) {
	rows, err := p.catalog.Buckets(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return stock.LoadResult{}, err
	}
	if len(rows) != st.Buckets {
		return stock.LoadResult{}, fmt.Errorf("session %d prize %d: %d bucket rows, want %d", st.SessionID, st.PrizeID, len(rows), st.Buckets)
	}
	ledger, err := p.catalog.Ledger(ctx, st.SessionID, st.PrizeID, st.Buckets)
	if err != nil {
		return stock.LoadResult{}, err
	}
	out := stock.LoadResult{PrizeID: st.PrizeID}
	// A transfer's move (a stock adjustment's, before the session) that commits between
	// the two reads leaves a ledger that records it beside a row without its units: the
	// give would then find it recorded and add nothing. Every move bumps its rows'
	// versions, so rows unchanged after the ledger's read mean the two agree; otherwise
	// read both again, as after a stale load.
	again, err := p.catalog.Buckets(ctx, st.SessionID, st.PrizeID)
	if err != nil {
		return stock.LoadResult{}, err
	}
	for i := range rows {
		if i >= len(again) || again[i].Version != rows[i].Version {
			out.Stale = true
			return out, nil
		}
	}
	for _, row := range rows {
		bst := st
		bst.Total, bst.Left, bst.Version = row.Total, row.Left, row.Version
		r, err := p.gate.LoadBucket(ctx, bst, row.Bucket, st.Buckets, ledger[row.Bucket], expire)
		if err != nil {
			return stock.LoadResult{}, err
		}
		out.Loaded = out.Loaded || r.Loaded
		out.Stale = out.Stale || r.Stale
	}
	return out, nil
}

func (p *Preheater) result(sessionID int64, res []stock.LoadResult, loaded map[int64]bool, expire time.Time) Result {
	out := Result{SessionID: sessionID, Loaded: []int64{}, Kept: []int64{}, ExpireAt: expire.UTC().Format(time.RFC3339)}
	for _, r := range res {
		if loaded[r.PrizeID] {
			out.Loaded = append(out.Loaded, r.PrizeID)
		} else {
			out.Kept = append(out.Kept, r.PrizeID)
		}
	}
	return out
}

// Due preheats every session that starts within lead from now and is not closed. It is
// what the scheduler runs each tick; repeating it is harmless.
func (p *Preheater) Due(ctx context.Context, lead time.Duration) ([]Result, error) {
	now := p.now()
	sessions, err := p.catalog.SessionsOverlapping(ctx, now, now.Add(lead))
	if err != nil {
		return nil, err
	}
	var out []Result
	var errs []error
	for _, s := range sessions {
		if !now.Before(s.Start) || s.ClosedAt != nil {
			continue
		}
		r, err := p.load(ctx, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// Adjustment is what Adjust did.
type Adjustment struct {
	Before, After seckill.Stock
	RedisUpdated  bool // false: the prize was not preheated; its preheat loads After
}

// Adjust sets a session×prize's stock to total before the session starts, in MySQL and in
// the gate together (store.Catalog.AdjustStock says in which order and why): an adjustment
// Redis refuses leaves MySQL unchanged, and a preheat that read the old total, racing it,
// cannot load that total afterwards. actor and remote (the address the request came from) go
// to the audit row.
func (p *Preheater) Adjust(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string) (Adjustment, error) {
	m := &mirror{gate: p.gate, grace: p.grace}
	before, after, err := p.catalog.AdjustStock(ctx, sessionID, prizeID, total, actor, remote, reason, m)
	if err != nil {
		return Adjustment{}, err
	}
	return Adjustment{Before: before, After: after, RedisUpdated: m.loaded}, nil
}

// mirror is the gate as the store's adjustment drives it.
type mirror struct {
	gate   gate
	grace  time.Duration
	loaded bool
}

func (m *mirror) Apply(ctx context.Context, s seckill.Session, after seckill.Stock) error {
	loaded, err := m.gate.Adjust(ctx, after, s.End.Add(m.grace))
	m.loaded = loaded
	return err
}

func (m *mirror) Revert(ctx context.Context, _ seckill.Session, before, after seckill.Stock) error {
	m.loaded = false
	return m.gate.UndoAdjust(ctx, after, before)
}
