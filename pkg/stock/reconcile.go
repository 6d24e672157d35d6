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
	//go:embed lua/keep.lua
	keepSrc string

	snapshotScript = redis.NewScript(snapshotSrc)
	correctScript  = redis.NewScript(correctSrc)
	rebuildScript  = redis.NewScript(rebuildSrc)
	removeScript   = redis.NewScript(removeSrc)
	keepScript     = redis.NewScript(keepSrc)
)

// Reservation is an admitted grab Redis holds until its order is settled.
type Reservation struct {
	RequestID  string
	UserID     string
	AdmittedAt time.Time
	Bucket     int // the stock bucket whose keys hold it (docs/design.md); set by ReservationsBucket
}

// View is one session×prize as the reconciler sees it.
type View struct {
	Loaded   bool
	Left     int64
	Total    int64
	Pending  int64 // reservations when Left was read (the same instant)
	Returned int64 // cancelled orders' units given back for resale, read with Left
	Reserved []Reservation
}

// View reads a session×prize's left stock, total and number of pending reservations
// atomically in one O(1) script, then lists the reservations with Reservations (paged
// HSCAN, outside Lua): a script walking the hash would block Redis, admission included,
// for as long as reservations pile up (Kafka down), which is when reconciliation runs.
//
// The listing is read after Left, not with it. That is safe for a compare-and-set on Left
// (CorrectLeft): a reservation added after Left was read means an admission moved Left, so
// the CAS fails; one settled meanwhile is an order MySQL already counts, whether or not
// the listing caught it. Read in the other order, an admission between the two reads
// would be missing from the listing yet counted in Left, and a correction would raise
// Left by it.
func (g *Gate) View(ctx context.Context, sessionID, prizeID int64) (View, error) {
	return g.view(ctx, sessionID, prizeID, KeysFor(sessionID, prizeID))
}

// ViewBucket is View of stock bucket b of a session×prize (docs/design.md).
func (g *Gate) ViewBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) (View, error) {
	return g.view(ctx, sessionID, prizeID, BucketKeysFor(sessionID, prizeID, b, buckets))
}

func (g *Gate) view(ctx context.Context, sessionID, prizeID int64, k Keys) (View, error) {
	res, err := snapshotScript.Run(ctx, g.rdb, []string{k.Meta, k.Reserved, k.Returned}).Slice()
	if err != nil {
		return View{}, fmt.Errorf("view session %d prize %d: %w", sessionID, prizeID, err)
	}
	if len(res) != 4 {
		return View{}, fmt.Errorf("view session %d prize %d: unexpected reply %v", sessionID, prizeID, res)
	}
	var v View
	if s, ok := res[0].(string); ok {
		v.Loaded = true
		v.Left, _ = strconv.ParseInt(s, 10, 64)
		t, _ := res[1].(string)
		v.Total, _ = strconv.ParseInt(t, 10, 64)
	}
	v.Pending, _ = res[2].(int64)
	v.Returned, _ = res[3].(int64)
	if v.Pending == 0 {
		return v, nil
	}
	if v.Reserved, err = g.reservations(ctx, sessionID, prizeID, k); err != nil {
		return View{}, err
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

// CorrectLeft sets left stock to to, only if left and the number of returned units are
// still what from (a View) read and fence is not older than the newest fence that wrote
// these keys.
func (g *Gate) CorrectLeft(ctx context.Context, sessionID, prizeID int64, from View, to, fence int64) error {
	return g.correctLeft(ctx, sessionID, prizeID, KeysFor(sessionID, prizeID), from, to, fence)
}

// CorrectBucketLeft is CorrectLeft of stock bucket b of a session×prize, from a ViewBucket.
func (g *Gate) CorrectBucketLeft(ctx context.Context, sessionID, prizeID int64, b, buckets int, from View, to, fence int64) error {
	return g.correctLeft(ctx, sessionID, prizeID, BucketKeysFor(sessionID, prizeID, b, buckets), from, to, fence)
}

func (g *Gate) correctLeft(ctx context.Context, sessionID, prizeID int64, k Keys, from View, to, fence int64) error {
	n, err := correctScript.Run(ctx, g.rdb, []string{k.Meta, k.Fence, k.Returned}, from.Left, to, fence, from.Returned).Int64()
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
// per-user counts, outcomes, the units st.Left already holds back from cancelled orders
// (returned: their request ids, so a return replayed later adds nothing) and the stock key,
// or nothing at all when the stock key exists. It returns false when the key was there.
func (g *Gate) Rebuild(ctx context.Context, st seckill.Stock, users map[string]int, outcomes []Settlement, returned []string, expireAt time.Time, fence int64) (bool, error) {
	return g.rebuild(ctx, KeysFor(st.SessionID, st.PrizeID), st, users, outcomes, returned, nil, expireAt, fence)
}

// rebuild runs rebuild.lua on k; a stock bucket's ledger (nil for a prize without buckets)
// goes after the outcomes, with the transfers key.
func (g *Gate) rebuild(ctx context.Context, k Keys, st seckill.Stock, users map[string]int, outcomes []Settlement, returned []string,
	ledger *seckill.BucketLedger, expireAt time.Time, fence int64) (bool, error) {
	args := make([]any, 0, 7+2*len(users)+len(returned)+2*len(outcomes))
	args = append(args, fence, st.Left, st.Total, st.PerUserLimit, expireAt.UnixMilli(), len(users), len(returned))
	for u, n := range users {
		args = append(args, u, n)
	}
	for _, rid := range returned {
		args = append(args, rid)
	}
	for _, o := range outcomes {
		kind, detail := o.encode()
		args = append(args, o.RequestID, o.UserID+"|"+kind+"|"+detail)
	}
	keys := []string{k.Meta, k.Users, k.Outcomes, k.Fence, k.Returned}
	if ledger != nil {
		keys = append(keys, k.Transfers())
		for id, n := range ledger.Transfers {
			args = append(args, id, n)
		}
		args = append(args, ledger.Sent, ledger.Received, len(ledger.Transfers))
	}
	n, err := rebuildScript.Run(ctx, g.rdb, keys, args...).Int64()
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
	return g.remove(ctx, sessionID, prizeID, []string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned}, fence)
}

// RemoveBucket is Remove for stock bucket b of a session×prize with buckets: the bucket's
// keys and its transfers, demand and wanted keys, unless reservations are pending there.
func (g *Gate) RemoveBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, fence int64) error {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	return g.remove(ctx, sessionID, prizeID,
		[]string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(), k.Demand(), k.Wanted()}, fence)
}

func (g *Gate) remove(ctx context.Context, sessionID, prizeID int64, keys []string, fence int64) error {
	n, err := removeScript.Run(ctx, g.rdb, keys, fence).Int64()
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

// Keep pushes a session×prize's key expiry to expireAt while reservations are pending (the
// stale job re-publishes from them, so they must outlive the session's end plus grace). It
// returns false when nothing is pending, the keys already live that long, or they are
// absent; ErrFenced for a stale fence.
func (g *Gate) Keep(ctx context.Context, sessionID, prizeID int64, expireAt time.Time, fence int64) (bool, error) {
	k := KeysFor(sessionID, prizeID)
	return g.keep(ctx, sessionID, prizeID, []string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned, k.Fence, k.revision()}, expireAt, fence)
}

// KeepBucket is Keep for stock bucket b of a session×prize with buckets, its transfers
// hash included (it must live as long as the bucket's stock key).
func (g *Gate) KeepBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, expireAt time.Time, fence int64) (bool, error) {
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	return g.keep(ctx, sessionID, prizeID,
		[]string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned, k.Fence, k.revision(), k.Transfers()}, expireAt, fence)
}

func (g *Gate) keep(ctx context.Context, sessionID, prizeID int64, keys []string, expireAt time.Time, fence int64) (bool, error) {
	n, err := keepScript.Run(ctx, g.rdb, keys, fence, expireAt.UnixMilli()).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("keep session %d prize %d: %w", sessionID, prizeID, err)
	case n == -2:
		return false, fmt.Errorf("keep session %d prize %d: %w", sessionID, prizeID, ErrFenced)
	}
	return n == 1, nil
}

// reservationPage is the HSCAN COUNT hint: each call does about this much work in Redis.
const reservationPage = 1000

// Reservations lists a session×prize's pending reservations with HSCAN, in pages of about
// reservationPage, without blocking Redis the way one big HGETALL would during a sale. Each
// reservation is returned once: HSCAN may repeat an entry (when the hash is resized during
// the scan), and a repeat would count a pending grab twice. Not atomic: entries added or
// removed during the scan may or may not be listed (see View for why the drift check is
// safe with that).
func (g *Gate) Reservations(ctx context.Context, sessionID, prizeID int64) ([]Reservation, error) {
	return g.reservations(ctx, sessionID, prizeID, KeysFor(sessionID, prizeID))
}

// ReservationsBucket is Reservations of stock bucket b of a session×prize (docs/design.md),
// each marked with b.
func (g *Gate) ReservationsBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) ([]Reservation, error) {
	out, err := g.reservations(ctx, sessionID, prizeID, BucketKeysFor(sessionID, prizeID, b, buckets))
	for i := range out {
		out[i].Bucket = b
	}
	return out, err
}

func (g *Gate) reservations(ctx context.Context, sessionID, prizeID int64, k Keys) ([]Reservation, error) {
	var out []Reservation
	seen := map[string]struct{}{}
	var cursor uint64
	for {
		kv, next, err := g.rdb.HScan(ctx, k.Reserved, cursor, "", reservationPage).Result()
		if err != nil {
			return nil, fmt.Errorf("scan reservations of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if _, dup := seen[kv[i]]; dup {
				continue
			}
			seen[kv[i]] = struct{}{}
			user, ms, _ := strings.Cut(kv[i+1], "|")
			n, _ := strconv.ParseInt(ms, 10, 64)
			out = append(out, Reservation{RequestID: kv[i], UserID: user, AdmittedAt: time.UnixMilli(n).UTC()})
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}
