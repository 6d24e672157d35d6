// Package schedule is the gateway's copy of the sessions around now and their prizes, so a
// grab outside its session's window is answered from memory, without Redis or MySQL.
package schedule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// Source is where the cache reads the schedule from (store.Catalog).
type Source interface {
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
}

// DrawSource says which session×prizes give their units by a draw (store.Draws).
type DrawSource interface {
	DrawPrizes(ctx context.Context, sessionIDs ...int64) ([]store.DrawPrize, error)
}

// Cache holds the sessions around now and their prizes, so "not open" is answered
// from memory without touching Redis or MySQL. It is reloaded every refresh; if MySQL is
// down, the last good copy keeps serving (admission does not depend on MySQL).
type Cache struct {
	src     Source
	draws   DrawSource // nil: no prize is a draw's
	now     func() time.Time
	refresh time.Duration

	// OnLoaded is told of each successful reload (a metric); may be nil. Set it before the
	// first Reload.
	OnLoaded func(at time.Time)

	mu       sync.RWMutex
	sessions map[int64]cachedSession
	loadedAt time.Time
}

type cachedSession struct {
	session seckill.Session
	prizes  map[int64]int // prize -> its number of stock buckets (1: none)
	// draws: prize -> the end of its entry window, for the prizes given by a draw.
	draws map[int64]time.Time
}

// The cache covers sessions that ended up to an hour ago or start within a day.
const (
	scheduleBehind = time.Hour
	scheduleAhead  = 24 * time.Hour
)

// New returns an empty cache of src's sessions, reloaded every refresh by Run.
func New(src Source, refresh time.Duration, now func() time.Time) *Cache {
	return &Cache{src: src, now: now, refresh: refresh, sessions: map[int64]cachedSession{}}
}

// WithDraws makes the cache know the draw prizes of its sessions (package draw).
func (c *Cache) WithDraws(src DrawSource) *Cache {
	c.draws = src
	return c
}

// Reload replaces the cache from MySQL.
func (c *Cache) Reload(ctx context.Context) error {
	now := c.now()
	sessions, err := c.src.SessionsOverlapping(ctx, now.Add(-scheduleBehind), now.Add(scheduleAhead))
	if err != nil {
		return fmt.Errorf("reload schedule: %w", err)
	}
	ids := make([]int64, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	stocks, err := c.src.Stocks(ctx, ids...)
	if err != nil {
		return fmt.Errorf("reload schedule: %w", err)
	}
	next := make(map[int64]cachedSession, len(sessions))
	for _, s := range sessions {
		next[s.ID] = cachedSession{session: s, prizes: map[int64]int{}}
	}
	for _, st := range stocks {
		next[st.SessionID].prizes[st.PrizeID] = st.BucketCount()
	}
	if c.draws != nil {
		draws, err := c.draws.DrawPrizes(ctx, ids...)
		if err != nil {
			return fmt.Errorf("reload schedule: %w", err)
		}
		for _, d := range draws {
			cs := next[d.Session]
			if cs.draws == nil {
				cs.draws = map[int64]time.Time{}
				next[d.Session] = cs
			}
			cs.draws[d.Prize] = cs.session.Start.Add(d.Window)
		}
	}
	c.mu.Lock()
	c.sessions, c.loadedAt = next, now
	c.mu.Unlock()
	if c.OnLoaded != nil {
		c.OnLoaded(now)
	}
	return nil
}

// Run reloads every refresh until ctx ends; failures are reported to onErr and the stale
// copy stays in use.
func (c *Cache) Run(ctx context.Context, onErr func(error)) error {
	t := time.NewTicker(c.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.Reload(ctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// ErrNotStarted is the ErrNotOpen of a known session that has not started yet: nothing of
// it can have been admitted, so even a keyed grab needs no lookup.
var ErrNotStarted = fmt.Errorf("%w: not started yet", seckill.ErrNotOpen)

// Check says whether a grab on session×prize may go to Redis at t: nil when open,
// seckill.ErrNotOpen when the session is not open (or unknown near now; ErrNotStarted when
// it is known and starts later), seckill.ErrNotFound when the session has no such prize.
func (c *Cache) Check(sessionID, prizeID int64, t time.Time) error {
	c.mu.RLock()
	s, ok := c.sessions[sessionID]
	c.mu.RUnlock()
	switch {
	case ok && t.Before(s.session.Start):
		return ErrNotStarted
	case !ok || !s.session.OpenAt(t):
		return seckill.ErrNotOpen
	case s.prizes[prizeID] == 0:
		return seckill.ErrNotFound
	}
	return nil
}

// Buckets returns a session×prize's number of stock buckets; 1 for a prize without, or
// one the cache does not know. It never changes once the session's stock rows exist.
func (c *Cache) Buckets(sessionID, prizeID int64) int {
	c.mu.RLock()
	n := c.sessions[sessionID].prizes[prizeID]
	c.mu.RUnlock()
	return max(n, 1)
}

// Draw returns the end of a session×prize's entry window when the prize gives its units by
// a draw; false for a first-come prize or one the cache does not know.
func (c *Cache) Draw(sessionID, prizeID int64) (time.Time, bool) {
	c.mu.RLock()
	end, ok := c.sessions[sessionID].draws[prizeID]
	c.mu.RUnlock()
	return end, ok
}
