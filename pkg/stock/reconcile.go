package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

var (
	//go:embed lua/snapshot.lua
	snapshotSrc string
	//go:embed lua/correct.lua
	correctSrc string
	//go:embed lua/rebuild.lua
	rebuildSrc string

	snapshotScript = redis.NewScript(snapshotSrc)
	correctScript  = redis.NewScript(correctSrc)
	rebuildScript  = redis.NewScript(rebuildSrc)
)

// Reservation is an admitted grab Redis holds until its order is settled.
type Reservation struct {
	RequestID  string
	UserID     string
	AdmittedAt time.Time
}

// View is an atomic snapshot of one session×prize for reconciliation.
type View struct {
	Loaded   bool
	Left     int64
	Total    int64
	Reserved []Reservation
}

// View reads a session×prize's left stock and pending reservations atomically.
func (g *Gate) View(ctx context.Context, sessionID, prizeID int64) (View, error) {
	k := KeysFor(sessionID, prizeID)
	res, err := snapshotScript.Run(ctx, g.rdb, []string{k.Meta, k.Reserved}).Slice()
	if err != nil {
		return View{}, fmt.Errorf("view session %d prize %d: %w", sessionID, prizeID, err)
	}
	var v View
	if s, ok := res[0].(string); ok {
		v.Loaded = true
		v.Left, _ = strconv.ParseInt(s, 10, 64)
		t, _ := res[1].(string)
		v.Total, _ = strconv.ParseInt(t, 10, 64)
	}
	flat, _ := res[2].([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		rid, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		user, ms, _ := strings.Cut(val, "|")
		n, _ := strconv.ParseInt(ms, 10, 64)
		v.Reserved = append(v.Reserved, Reservation{RequestID: rid, UserID: user, AdmittedAt: time.UnixMilli(n).UTC()})
	}
	return v, nil
}

// ErrMoved is returned by CorrectLeft when Redis changed since it was read.
var ErrMoved = errors.New("stock moved since it was read")

// CorrectLeft sets left stock to to, only if it is still from.
func (g *Gate) CorrectLeft(ctx context.Context, sessionID, prizeID, from, to int64) error {
	n, err := correctScript.Run(ctx, g.rdb, []string{KeysFor(sessionID, prizeID).Meta}, from, to).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("correct session %d prize %d: %w", sessionID, prizeID, err)
	case n == 0:
		return ErrMoved
	case n < 0:
		return seckill.ErrNotLoaded
	}
	return nil
}

// Rebuild recreates a lost session×prize from the system of record: per-user counts and
// outcomes first, then the stock key. It never overwrites a present stock key.
func (g *Gate) Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []Settlement, expireAt time.Time) (bool, error) {
	k := KeysFor(st.SessionID, st.PrizeID)
	exp := expireAt.UnixMilli()
	const chunk = 500
	pipe := g.rdb.Pipeline()
	args := make([]any, 0, 2*chunk)
	flushUsers := func() {
		if len(args) > 0 {
			pipe.HSet(ctx, k.Users, args...)
			args = args[:0]
		}
	}
	for u, n := range users {
		args = append(args, u, n)
		if len(args) == 2*chunk {
			flushUsers()
		}
	}
	flushUsers()
	for i := 0; i < len(outcomes); i += chunk {
		vals := make([]any, 0, 2*chunk)
		for _, o := range outcomes[i:min(i+chunk, len(outcomes))] {
			v := o.UserID + "|s|" + strconv.FormatInt(o.OrderID, 10)
			if o.Reason != "" {
				v = o.UserID + "|r|" + o.Reason
			}
			vals = append(vals, o.RequestID, v)
		}
		pipe.HSet(ctx, k.Outcomes, vals...)
	}
	pipe.PExpireAt(ctx, k.Users, expireAt)
	pipe.PExpireAt(ctx, k.Outcomes, expireAt)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("rebuild session %d prize %d: %w", st.SessionID, st.PrizeID, err)
	}
	n, err := rebuildScript.Run(ctx, g.rdb, []string{k.Meta}, st.Left, st.Total, st.PerUserLimit, exp).Int64()
	if err != nil {
		return false, fmt.Errorf("rebuild session %d prize %d: %w", st.SessionID, st.PrizeID, err)
	}
	return n == 1, nil
}

// Remove deletes a session×prize's keys (after its grace period).
func (g *Gate) Remove(ctx context.Context, sessionID, prizeID int64) error {
	k := KeysFor(sessionID, prizeID)
	return g.rdb.Del(ctx, k.all()...).Err()
}

// Reservations lists a session×prize's pending reservations with HSCAN, in pages, without
// blocking Redis the way one big HGETALL would during a sale. Not atomic: for the stale
// check, which only looks at old entries.
func (g *Gate) Reservations(ctx context.Context, sessionID, prizeID int64) ([]Reservation, error) {
	k := KeysFor(sessionID, prizeID)
	var out []Reservation
	var cursor uint64
	for {
		kv, next, err := g.rdb.HScan(ctx, k.Reserved, cursor, "", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan reservations of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			user, ms, _ := strings.Cut(kv[i+1], "|")
			n, _ := strconv.ParseInt(ms, 10, 64)
			out = append(out, Reservation{RequestID: kv[i], UserID: user, AdmittedAt: time.UnixMilli(n).UTC()})
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}
