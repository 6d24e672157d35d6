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
	//go:embed lua/remove.lua
	removeSrc string

	snapshotScript = redis.NewScript(snapshotSrc)
	correctScript  = redis.NewScript(correctSrc)
	rebuildScript  = redis.NewScript(rebuildSrc)
	removeScript   = redis.NewScript(removeSrc)
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

// ErrFenced is returned by the reconciler's writes when a reconciler with a newer fencing
// number already wrote this session×prize: the caller's lease was taken over.
var ErrFenced = errors.New("stale fence: a newer reconciler acted on these keys")

// ErrPending is returned by Remove while reservations wait for their orders.
var ErrPending = errors.New("reservations still pending")

// CorrectLeft sets left stock to to, only if it is still from and fence is not older than
// the newest fence that wrote these keys.
func (g *Gate) CorrectLeft(ctx context.Context, sessionID, prizeID, from, to, fence int64) error {
	k := KeysFor(sessionID, prizeID)
	n, err := correctScript.Run(ctx, g.rdb, []string{k.Meta, k.Fence}, from, to, fence).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("correct session %d prize %d: %w", sessionID, prizeID, err)
	case n == 0:
		return ErrMoved
	case n == -1:
		return seckill.ErrNotLoaded
	case n == -2:
		return fmt.Errorf("correct session %d prize %d: %w", sessionID, prizeID, ErrFenced)
	}
	return nil
}

// Rebuild recreates a lost session×prize from the system of record in one atomic script:
// per-user counts, outcomes and the stock key, or nothing at all when the stock key exists.
// It returns false when the key was there.
func (g *Gate) Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []Settlement, expireAt time.Time, fence int64) (bool, error) {
	k := KeysFor(st.SessionID, st.PrizeID)
	args := make([]any, 0, 6+2*len(users)+2*len(outcomes))
	args = append(args, fence, st.Left, st.Total, st.PerUserLimit, expireAt.UnixMilli(), len(users))
	for u, n := range users {
		args = append(args, u, n)
	}
	for _, o := range outcomes {
		v := o.UserID + "|s|" + strconv.FormatInt(o.OrderID, 10)
		if o.Reason != "" {
			v = o.UserID + "|r|" + o.Reason
		}
		args = append(args, o.RequestID, v)
	}
	n, err := rebuildScript.Run(ctx, g.rdb, []string{k.Meta, k.Users, k.Outcomes, k.Fence}, args...).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("rebuild session %d prize %d: %w", st.SessionID, st.PrizeID, err)
	case n == -2:
		return false, fmt.Errorf("rebuild session %d prize %d: %w", st.SessionID, st.PrizeID, ErrFenced)
	}
	return n == 1, nil
}

// Remove deletes an ended session×prize's keys (after its grace period). It refuses with
// ErrPending while reservations are not settled, and with ErrFenced for a stale fence.
func (g *Gate) Remove(ctx context.Context, sessionID, prizeID, fence int64) error {
	k := KeysFor(sessionID, prizeID)
	n, err := removeScript.Run(ctx, g.rdb, []string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence}, fence).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("remove session %d prize %d: %w", sessionID, prizeID, err)
	case n == -2:
		return fmt.Errorf("remove session %d prize %d: %w", sessionID, prizeID, ErrFenced)
	case n == -3:
		return fmt.Errorf("remove session %d prize %d: %w", sessionID, prizeID, ErrPending)
	}
	return nil
}

// reservationPage is the HSCAN COUNT hint: each call does about this much work in Redis.
const reservationPage = 1000

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
