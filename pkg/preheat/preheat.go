// Package preheat loads a session's stock from MySQL into the Redis gate before the session
// opens, on demand (admin API) or on a schedule (reconciler).
package preheat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// ErrStarted is returned for a session that has already opened. While a session is open the
// database lags Redis by the events in flight, so loading from it could hand out stock twice;
// missing keys of an open session are rebuilt by the reconciler once consumers caught up.
var ErrStarted = errors.New("session already started; the reconciler rebuilds missing keys of open sessions")

type catalog interface {
	Session(ctx context.Context, id int64) (seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
}

type loader interface {
	Load(ctx context.Context, stocks []seckill.Stock, expireAt time.Time) ([]stock.LoadResult, error)
}

// Preheater loads sessions' stock into the gate.
type Preheater struct {
	catalog catalog
	gate    loader
	grace   time.Duration // keys live until session end + grace
	now     func() time.Time
}

// New returns a Preheater. grace is how long keys outlive their session, for late status
// polls and for the consumer and reconciler to settle the last reservations.
func New(c catalog, g loader, grace time.Duration, now func() time.Time) *Preheater {
	return &Preheater{catalog: c, gate: g, grace: grace, now: now}
}

// Result says what one preheat did.
type Result struct {
	SessionID int64   `json:"session_id"`
	Loaded    []int64 `json:"loaded"` // prizes whose keys were created
	Kept      []int64 `json:"kept"`   // prizes whose keys existed and were left alone
	ExpireAt  string  `json:"expire_at"`
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
	stocks, err := p.catalog.Stocks(ctx, s.ID)
	if err != nil {
		return Result{}, err
	}
	expire := s.End.Add(p.grace)
	res, err := p.gate.Load(ctx, stocks, expire)
	if err != nil {
		return Result{}, fmt.Errorf("preheat session %d: %w", s.ID, err)
	}
	out := Result{SessionID: s.ID, Loaded: []int64{}, Kept: []int64{}, ExpireAt: expire.UTC().Format(time.RFC3339)}
	for _, r := range res {
		if r.Loaded {
			out.Loaded = append(out.Loaded, r.PrizeID)
		} else {
			out.Kept = append(out.Kept, r.PrizeID)
		}
	}
	return out, nil
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
