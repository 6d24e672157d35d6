package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

//go:embed lua/return.lua
var returnSrc string

var returnScript = redis.NewScript(returnSrc)

// UnitReturn is a cancelled order whose unit MySQL already took back (left_stock), for the
// gate: Resale puts the unit back on sale (the session is open), ReleaseSlot lets the buyer
// grab again. Without Resale only the outcome changes (status polls say cancelled).
type UnitReturn struct {
	SessionID   int64 // for ReturnAll (Return takes the session×prize as arguments)
	PrizeID     int64
	RequestID   string
	UserID      string
	OrderID     int64
	Reason      string
	Resale      bool
	ReleaseSlot bool
	Bucket      int // the order's stock bucket (docs/design.md): its keys get the unit (ReturnAll)
	Buckets     int // the prize's N, which names bucket Bucket's keys (BucketKeysFor); any for bucket 0
}

// ReturnResult is what Return did. Loaded is false when the prize's stock key is absent:
// then nothing was written, and the return is still to make (after the rebuild, which
// counts the unit from MySQL, a replay finds it Already done).
type ReturnResult struct {
	Loaded   bool
	Returned int // units back on sale
	Already  int // given back before (a replay, a redelivery, a rebuild)
	Marked   int // outcome only: returned after the session, not for sale
}

// Return gives cancelled orders' units of one session×prize back in one atomic script:
// each unit at most once per request id, whatever replays it (the script records the
// request id in the prize's returned hash, in the same hash tag).
func (g *Gate) Return(ctx context.Context, sessionID, prizeID int64, items []UnitReturn) (ReturnResult, error) {
	return g.ReturnBucket(ctx, sessionID, prizeID, 0, 1, items)
}

// ReturnBucket is Return on stock bucket b of a session×prize (bucket 0: the prize's keys):
// a cancelled order's unit goes back to the bucket that sold it.
func (g *Gate) ReturnBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int, items []UnitReturn) (ReturnResult, error) {
	if len(items) == 0 {
		return ReturnResult{Loaded: true}, nil
	}
	k := BucketKeysFor(sessionID, prizeID, b, buckets)
	args := make([]any, 0, 6*len(items))
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	for _, it := range items {
		args = append(args, it.RequestID, it.UserID, strconv.FormatInt(it.OrderID, 10), it.Reason, flag(it.Resale), flag(it.ReleaseSlot))
	}
	res, err := returnScript.Run(ctx, g.rdb, []string{k.Meta, k.Users, k.Reserved, k.Outcomes, k.Returned}, args...).Int64Slice()
	if err != nil {
		return ReturnResult{}, fmt.Errorf("return %d units of session %d prize %d: %w", len(items), sessionID, prizeID, err)
	}
	if len(res) != 3 {
		return ReturnResult{}, fmt.Errorf("return units of session %d prize %d: unexpected reply %v", sessionID, prizeID, res)
	}
	if res[0] < 0 {
		return ReturnResult{}, nil
	}
	return ReturnResult{Loaded: true, Returned: int(res[0]), Already: int(res[1]), Marked: int(res[2])}, nil
}

// Returned lists the request ids of a session×prize's units given back for resale (its
// returned hash) with HSCAN in pages, so a long list never blocks Redis the way one HKEYS
// in a script would. Not atomic: a return made during the scan may or may not be listed.
// loaded says whether the prize's stock key exists after the scan: without it the hash is
// gone with the keys, and the rebuild (which writes it from MySQL) is what restores it.
func (g *Gate) Returned(ctx context.Context, sessionID, prizeID int64) (ids map[string]struct{}, loaded bool, err error) {
	return g.returned(ctx, sessionID, prizeID, KeysFor(sessionID, prizeID))
}

// ReturnedBucket is Returned of stock bucket b of a session×prize (docs/design.md).
func (g *Gate) ReturnedBucket(ctx context.Context, sessionID, prizeID int64, b, buckets int) (ids map[string]struct{}, loaded bool, err error) {
	return g.returned(ctx, sessionID, prizeID, BucketKeysFor(sessionID, prizeID, b, buckets))
}

func (g *Gate) returned(ctx context.Context, sessionID, prizeID int64, k Keys) (ids map[string]struct{}, loaded bool, err error) {
	ids = map[string]struct{}{}
	var cursor uint64
	for {
		kv, next, err := g.rdb.HScan(ctx, k.Returned, cursor, "", reservationPage).Result()
		if err != nil {
			return nil, false, fmt.Errorf("scan returned units of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			ids[kv[i]] = struct{}{}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	n, err := g.rdb.Exists(ctx, k.Meta).Result()
	if err != nil {
		return nil, false, fmt.Errorf("returned units of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return ids, n == 1, nil
}

// ReturnReport is what ReturnAll did.
type ReturnReport struct {
	Done                      []int64      // order ids whose Redis step ran or was done before
	Waiting                   []UnitReturn // their prize has no stock key (not loaded, or lost): still to do
	Returned, Already, Marked int
}

// ReturnAll runs Return for every session×prize of items, one script each, and reports per
// order what was done. An error of one prize does not stop the others; its units are neither
// done nor waiting (retry them).
func (g *Gate) ReturnAll(ctx context.Context, items []UnitReturn) (ReturnReport, error) {
	var rep ReturnReport
	// One script per stock bucket of a session×prize (one bucket, its keys, without buckets).
	type bucketOf struct {
		seckill.SessionPrize
		b, n int
	}
	byPrize := map[bucketOf][]UnitReturn{}
	var order []bucketOf
	for _, it := range items {
		k := bucketOf{seckill.SessionPrize{Session: it.SessionID, Prize: it.PrizeID}, it.Bucket, it.Buckets}
		if byPrize[k] == nil {
			order = append(order, k)
		}
		byPrize[k] = append(byPrize[k], it)
	}
	var errs []error
	for _, k := range order {
		if err := checkBucket(k.b, k.n); err != nil {
			errs = append(errs, fmt.Errorf("return to session %d prize %d: %w", k.Session, k.Prize, err))
			continue
		}
		res, err := g.ReturnBucket(ctx, k.Session, k.Prize, k.b, k.n, byPrize[k])
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case !res.Loaded:
			rep.Waiting = append(rep.Waiting, byPrize[k]...)
			continue
		}
		rep.Returned += res.Returned
		rep.Already += res.Already
		rep.Marked += res.Marked
		for _, it := range byPrize[k] {
			rep.Done = append(rep.Done, it.OrderID)
		}
	}
	return rep, errors.Join(errs...)
}

// SettlementOf is what the gate should record for a stored order: succeeded (its order
// id), rejected (its reason) or cancelled (both). Redelivered grab events and leftover
// reservations are settled from it, under the order's owner.
func SettlementOf(o seckill.Order) Settlement {
	s := Settlement{RequestID: o.RequestID, UserID: o.UserID}
	switch o.Status {
	case seckill.OrderSucceeded:
		s.OrderID = o.ID
	case seckill.OrderCancelled:
		s.OrderID, s.Reason, s.Cancelled = o.ID, string(o.Reason), true
	default:
		s.Reason = string(o.Reason)
	}
	return s
}

// encode is a settlement's kind and detail for the settle and rebuild scripts:
// "s" order id, "r" reason, or "c" "order id|reason".
func (s Settlement) encode() (kind, detail string) {
	switch {
	case s.Cancelled:
		return "c", strconv.FormatInt(s.OrderID, 10) + "|" + s.Reason
	case s.Reason == "":
		return "s", strconv.FormatInt(s.OrderID, 10)
	}
	return "r", s.Reason
}
