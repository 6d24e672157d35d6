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
	//go:embed lua/reserve.lua
	reserveSrc string
	//go:embed lua/load.lua
	loadSrc string
	//go:embed lua/adjust.lua
	adjustSrc string
	//go:embed lua/settle.lua
	settleSrc string
)

// Keys are one session×prize's Redis keys. They share the hash tag {session:prize}, so the
// admission script touches a single Redis Cluster slot.
type Keys struct {
	Meta     string // hash: left, total, limit, exp
	Users    string // hash: user id -> admitted count
	Reserved string // hash: request id -> "user|admitted_ms" (admitted, not yet an order)
	Outcomes string // hash: request id -> "user|s|order id", "user|r|reason" or "user|c|order id|reason"
	Fence    string // string: the highest reconciler fencing number that wrote these keys
	Returned string // hash: request id -> 1, cancelled orders' units given back for resale
}

// KeysFor returns the keys of a session×prize.
func KeysFor(sessionID, prizeID int64) Keys {
	return keysTagged(strconv.FormatInt(sessionID, 10) + ":" + strconv.FormatInt(prizeID, 10))
}

// keysTagged names the keys of one hash tag (a session×prize, or one of its stock buckets).
func keysTagged(hashTag string) Keys {
	tag := "sk:{" + hashTag + "}:"
	return Keys{Meta: tag + "meta", Users: tag + "users", Reserved: tag + "res", Outcomes: tag + "out", Fence: tag + "fence",
		Returned: tag + "ret"}
}

func (k Keys) all() []string { return []string{k.Meta, k.Users, k.Reserved, k.Outcomes} }

// Code is the gate's verdict on one grab.
type Code int

// Verdicts, in the order the script checks them.
const (
	Admitted Code = iota
	Seen          // the request id was admitted before; State says where it is now
	Limit
	SoldOut
	NotLoaded
	Foreign // the request id belongs to another user
	// Drawn: the prize's units are given by its draw now (package draw), not to grabs.
	Drawn
)

func (c Code) String() string {
	switch c {
	case Admitted:
		return "admitted"
	case Seen:
		return "seen"
	case Limit:
		return "limit"
	case SoldOut:
		return "sold_out"
	case NotLoaded:
		return "not_loaded"
	case Foreign:
		return "foreign"
	case Drawn:
		return "drawn"
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// Verdict is the result of Reserve.
type Verdict struct {
	Code  Code
	Left  int64  // stock left after the call (-1 when not loaded)
	State Status // for Seen: the request's current state
}

// Status is where a grab is from the gate's point of view.
type Status struct {
	State   string // "queued", "succeeded", "rejected", "cancelled" ("" when unknown)
	OrderID int64
	Reason  string
}

// Gate is the Redis admission gate.
type Gate struct {
	rdb     redis.UniversalClient
	reserve *redis.Script
	load    *redis.Script
	adjust  *redis.Script
	settle  *redis.Script

	coalesce *coalescer // nil: one EVALSHA round trip per Reserve
}

// NewGate returns a gate on rdb and loads its scripts, so the first grab pays no SCRIPT
// LOAD; EVALSHA falls back to EVAL on NOSCRIPT (e.g. after a Redis restart).
// It refuses a Redis that may evict keys (CheckPolicy).
func NewGate(ctx context.Context, rdb redis.UniversalClient, opts ...Option) (*Gate, error) {
	if err := CheckPolicy(ctx, rdb); err != nil {
		return nil, err
	}
	g := &Gate{
		rdb:     rdb,
		reserve: redis.NewScript(reserveSrc),
		load:    redis.NewScript(loadSrc),
		adjust:  redis.NewScript(adjustSrc),
		settle:  redis.NewScript(settleSrc),
	}
	for _, s := range []*redis.Script{g.reserve, g.load, g.adjust, g.settle} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("load gate scripts: %w", err)
		}
	}
	for _, opt := range opts {
		opt(g)
	}
	if g.coalesce != nil {
		g.coalesce.run()
	}
	return g, nil
}

// Reserve runs the admission script for one grab. A retry of the same request id (by
// go-redis after a lost reply, or by the client) returns Seen and deducts nothing.
func (g *Gate) Reserve(ctx context.Context, gr seckill.Grab) (Verdict, error) {
	if err := checkBucket(gr.Bucket, gr.Buckets); err != nil {
		return Verdict{}, fmt.Errorf("reserve %s: %w", gr.RequestID, err)
	}
	res, err := g.reserveCall(ctx, gr)
	if err != nil {
		return Verdict{}, err
	}
	return verdictOf(gr.RequestID, res)
}

// ReserveAll runs the admission script once for grabs of one session×prize without stock
// buckets, judged in their order exactly as if each ran alone in that order (the script's
// batch form): the draw admits a page of winners in one round trip. The verdicts are in the
// grabs' order.
func (g *Gate) ReserveAll(ctx context.Context, grabs []seckill.Grab) ([]Verdict, error) {
	if len(grabs) == 0 {
		return nil, nil
	}
	keys, _ := reserveArgs(grabs[0])
	args := make([]any, 0, 3*len(grabs))
	for _, gr := range grabs {
		if gr.SessionID != grabs[0].SessionID || gr.PrizeID != grabs[0].PrizeID || gr.Bucket != 0 {
			return nil, fmt.Errorf("reserve %d grabs: not all of %s without buckets", len(grabs), grabs[0].SessionPrize())
		}
		_, a := reserveArgs(gr)
		args = append(args, a...)
	}
	res, err := g.reserve.Run(ctx, g.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("reserve %d grabs of %s: %w", len(grabs), grabs[0].SessionPrize(), err)
	}
	if len(res) != 3*len(grabs) {
		return nil, fmt.Errorf("reserve %d grabs of %s: %d values in the reply", len(grabs), grabs[0].SessionPrize(), len(res))
	}
	out := make([]Verdict, len(grabs))
	for i, gr := range grabs {
		if out[i], err = verdictOf(gr.RequestID, res[3*i:3*i+3]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// verdictOf reads one grab's {code, left, detail} from the admission script's reply.
func verdictOf(requestID string, res []any) (Verdict, error) {
	if len(res) != 3 {
		return Verdict{}, fmt.Errorf("reserve %s: unexpected reply %v", requestID, res)
	}
	code, _ := res[0].(int64)
	left, _ := res[1].(int64)
	detail, _ := res[2].(string)
	v := Verdict{Code: Code(code), Left: left}
	if v.Code == Seen {
		v.State = parseState(detail)
	}
	return v, nil
}

// parseState reads "queued", "s|order id", "r|reason" or "c|order id|reason".
func parseState(s string) Status {
	kind, rest, _ := strings.Cut(s, "|")
	switch kind {
	case "s":
		id, _ := strconv.ParseInt(rest, 10, 64)
		return Status{State: "succeeded", OrderID: id}
	case "r":
		return Status{State: "rejected", Reason: rest}
	case "c":
		oid, reason, _ := strings.Cut(rest, "|")
		id, _ := strconv.ParseInt(oid, 10, 64)
		return Status{State: "cancelled", OrderID: id, Reason: reason}
	case "queued":
		return Status{State: "queued"}
	}
	return Status{}
}

// Lookup is what the gate knows of one request id.
type Lookup struct {
	Found  bool   // the request was admitted and Redis still remembers it
	Owner  string // the user who made it
	Status Status
	Live   bool // the session×prize's keys exist: a request Redis does not know was never admitted
}

// Lookup returns a request's state and owner from the gate in one round trip.
func (g *Gate) Lookup(ctx context.Context, requestID string) (Lookup, error) {
	return g.LookupBucket(ctx, requestID, 0, 1)
}

// LookupBucket is Lookup in stock bucket b of the request's session×prize: where its user's
// grabs are admitted (HomeBucket).
func (g *Gate) LookupBucket(ctx context.Context, requestID string, b, buckets int) (Lookup, error) {
	sid, pid, _, err := seckill.ParseRequestID(requestID)
	if err != nil {
		return Lookup{}, err
	}
	k := BucketKeysFor(sid, pid, b, buckets)
	pipe := g.rdb.Pipeline()
	res := pipe.HGet(ctx, k.Reserved, requestID)
	out := pipe.HGet(ctx, k.Outcomes, requestID)
	live := pipe.Exists(ctx, k.Meta)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Lookup{}, fmt.Errorf("lookup %s: %w", requestID, err)
	}
	l := Lookup{Live: live.Val() == 1}
	if v, err := out.Result(); err == nil {
		owner, rest, _ := strings.Cut(v, "|")
		l.Found, l.Owner, l.Status = true, owner, parseState(rest)
	} else if v, err := res.Result(); err == nil {
		owner, _, _ := strings.Cut(v, "|")
		l.Found, l.Owner, l.Status = true, owner, Status{State: "queued"}
	}
	return l, nil
}

// LoadResult says what Load did for one prize.
type LoadResult struct {
	PrizeID int64
	Loaded  bool // false: the key was already there and was left alone
	Stale   bool // refused: an adjustment newer than the row given has reached Redis; read it again
}

// revision is the key that holds the newest stock-row version an adjustment wrote to Redis
// (a string, with the same TTL as the stock key). It is kept apart from the stock key
// because that key's presence means "loaded", and an adjustment of a prize not yet
// preheated must still be able to turn away a preheat that read the old row.
func (k Keys) revision() string { return strings.TrimSuffix(k.Meta, "meta") + "rev" }

// Load preheats a session: for every stock row it creates the prize's key if absent, in
// one pipelined round trip, with a TTL of expireAt (at least the session's end plus a grace
// period; the caller decides). Loading twice is harmless: live keys are never overwritten.
// Each row's Version is its revision: a row older than an adjustment that already reached
// Redis is refused (Stale), so a preheat racing an adjustment never loads the old total.
func (g *Gate) Load(ctx context.Context, stocks []seckill.Stock, expireAt time.Time) ([]LoadResult, error) {
	if len(stocks) == 0 {
		return nil, nil
	}
	calls := make([]scriptCall, len(stocks))
	for i, s := range stocks {
		k := KeysFor(s.SessionID, s.PrizeID)
		calls[i] = scriptCall{keys: []string{k.Meta, k.Reserved, k.revision()},
			args: []any{s.Left, s.Total, s.PerUserLimit, expireAt.UnixMilli(), s.Version}}
	}
	// A script missing on a node (restart) is run with EVAL there; the script is
	// idempotent, so keys an earlier attempt created are kept, not doubled.
	cmds := runScripts(ctx, g.rdb, g.load, calls)
	out := make([]LoadResult, len(stocks))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return nil, fmt.Errorf("preheat session %d prize %d: %w", stocks[i].SessionID, stocks[i].PrizeID, err)
		}
		out[i] = LoadResult{PrizeID: stocks[i].PrizeID, Loaded: n == 1, Stale: n == -1}
	}
	return out, nil
}

// Settlement is one persisted grab's outcome for the gate.
type Settlement struct {
	RequestID string
	UserID    string
	OrderID   int64  // succeeded and cancelled orders
	Reason    string // rejected and cancelled orders ("" means succeeded)
	Cancelled bool   // a cancelled order: recorded as such; its unit is Return's business
}

// SettleBatch is the settlements of one session×prize.
type SettleBatch struct {
	SessionID, PrizeID int64
	// Bucket is the stock bucket whose keys (BucketKeysFor) hold the grabs' reservations:
	// the one that admitted them (docs/design.md); 0 for a prize without buckets.
	Bucket int
	// Buckets is the prize's N, which names bucket Bucket's keys (BucketKeysFor); any value
	// will do for bucket 0.
	Buckets int
	Items   []Settlement
}

// Settle records outcomes and clears reservations, one pipelined round trip for all
// batches. It returns how many reservations were cleared.
func (g *Gate) Settle(ctx context.Context, batches []SettleBatch) (int64, error) {
	if len(batches) == 0 {
		return 0, nil
	}
	calls := make([]scriptCall, len(batches))
	for i, b := range batches {
		if err := checkBucket(b.Bucket, b.Buckets); err != nil {
			return 0, fmt.Errorf("settle session %d prize %d: %w", b.SessionID, b.PrizeID, err)
		}
		k := BucketKeysFor(b.SessionID, b.PrizeID, b.Bucket, b.Buckets)
		args := make([]any, 0, 4*len(b.Items))
		for _, it := range b.Items {
			kind, detail := it.encode()
			args = append(args, it.RequestID, it.UserID, kind, detail)
		}
		calls[i] = scriptCall{keys: k.all(), args: args}
	}
	var cleared int64
	var errs []error
	for i, c := range runScripts(ctx, g.rdb, g.settle, calls) {
		n, err := c.Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("settle session %d prize %d bucket %d: %w", batches[i].SessionID, batches[i].PrizeID, batches[i].Bucket, err))
			continue
		}
		cleared += n
	}
	return cleared, errors.Join(errs...)
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// ErrAdmitted is returned by Adjust when grabs were already admitted for the prize.
var ErrAdmitted = errors.New("grabs already admitted")

// ErrNewerRevision is returned by Adjust when Redis already holds a newer stock revision
// than the adjustment's.
var ErrNewerRevision = errors.New("redis holds a newer stock revision")

// Adjust makes a not yet opened session×prize's key hold st.Total, recorded as revision
// st.Version (the stock row's version after the adjustment). Call it inside the MySQL
// transaction that adjusts the row, before the commit and with the row locked: then Redis
// refusing (ErrAdmitted) leaves MySQL unchanged, and any preheat that read the old row
// reaches Redis after the revision and is refused. It returns loaded=false when the key is
// absent (the next preheat loads the new total from MySQL); the revision is recorded
// either way, until expireAt (the key's own expiry: session end plus grace).
func (g *Gate) Adjust(ctx context.Context, st seckill.Stock, expireAt time.Time) (loaded bool, err error) {
	k := KeysFor(st.SessionID, st.PrizeID)
	n, err := g.adjust.Run(ctx, g.rdb, []string{k.Meta, k.Reserved, k.revision()},
		"set", st.Total, st.Version, expireAt.UnixMilli()).Int64()
	if err != nil {
		return false, fmt.Errorf("adjust session %d prize %d: %w", st.SessionID, st.PrizeID, err)
	}
	switch n {
	case 1:
		return true, nil
	case 0:
		return false, nil
	case -2:
		return true, fmt.Errorf("adjust session %d prize %d to revision %d: %w", st.SessionID, st.PrizeID, st.Version, ErrNewerRevision)
	}
	return true, fmt.Errorf("adjust session %d prize %d: %w", st.SessionID, st.PrizeID, ErrAdmitted)
}

// UndoAdjust reverts an Adjust to undone whose MySQL transaction did not commit, back to
// restore (the row as MySQL still has it). Call it with the row locked again, so no other
// adjustment runs in between; it changes only what still carries undone's revision, and
// repeating it is harmless.
func (g *Gate) UndoAdjust(ctx context.Context, undone, restore seckill.Stock) error {
	k := KeysFor(undone.SessionID, undone.PrizeID)
	err := g.adjust.Run(ctx, g.rdb, []string{k.Meta, k.Reserved, k.revision()},
		"undo", undone.Version, restore.Total, restore.Version).Err()
	if err != nil {
		return fmt.Errorf("undo adjustment of session %d prize %d: %w", undone.SessionID, undone.PrizeID, err)
	}
	return nil
}

// Snapshot is one session×prize as Redis sees it.
type Snapshot struct {
	SessionID int64 `json:"session_id"`
	PrizeID   int64 `json:"prize_id"`
	Loaded    bool  `json:"loaded"`
	Left      int64 `json:"left"`
	Total     int64 `json:"total"`
	Limit     int64 `json:"limit"`
	Pending   int64 `json:"pending"` // admitted, not yet settled into an order
	Settled   int64 `json:"settled"` // outcomes recorded for status polling
	TTLMillis int64 `json:"ttl_ms"`
}

// Snapshots reads the given session×prizes in one pipelined round trip.
func (g *Gate) Snapshots(ctx context.Context, ids []seckill.SessionPrize) ([]Snapshot, error) {
	keys := make([]Keys, len(ids))
	for i, id := range ids {
		keys[i] = KeysFor(id.Session, id.Prize)
	}
	return g.snapshots(ctx, ids, keys)
}

// BucketSnapshots reads the n stock buckets of a session×prize (docs/design.md) as
// Snapshots does, in one pipelined round trip (not one atomic read: the buckets live on
// different slots).
func (g *Gate) BucketSnapshots(ctx context.Context, id seckill.SessionPrize, n int) ([]Snapshot, error) {
	ids, keys := make([]seckill.SessionPrize, n), make([]Keys, n)
	for b := range n {
		ids[b], keys[b] = id, BucketKeysFor(id.Session, id.Prize, b, n)
	}
	return g.snapshots(ctx, ids, keys)
}

// PrizeSnapshots reads each stock's session×prize as one snapshot summed over its stock
// buckets (SumSnapshots; a prize without buckets reads as Snapshots reads it), every bucket
// of every prize in one pipelined round trip (not one atomic read: the buckets live on
// different slots). A stock's BucketCount names its buckets' keys (BucketKeysFor), so it
// must be the prize's N as MySQL has it. The snapshots are index-aligned with stocks.
func (g *Gate) PrizeSnapshots(ctx context.Context, stocks []seckill.Stock) ([]Snapshot, error) {
	var ids []seckill.SessionPrize
	var keys []Keys
	for _, st := range stocks {
		n := st.BucketCount()
		for b := range n {
			ids = append(ids, st.SessionPrize())
			keys = append(keys, BucketKeysFor(st.SessionID, st.PrizeID, b, n)) // b = 0: KeysFor
		}
	}
	buckets, err := g.snapshots(ctx, ids, keys) // its error says "stock snapshots"
	if err != nil {
		return nil, err
	}
	out := make([]Snapshot, len(stocks))
	for i, st := range stocks {
		n := st.BucketCount()
		out[i], buckets = SumSnapshots(buckets[:n]), buckets[n:]
	}
	return out, nil
}

func (g *Gate) snapshots(ctx context.Context, ids []seckill.SessionPrize, keys []Keys) ([]Snapshot, error) {
	type cmds struct {
		meta          *redis.SliceCmd
		pending, done *redis.IntCmd
		ttl           *redis.DurationCmd
	}
	pipe := g.rdb.Pipeline()
	cs := make([]cmds, len(ids))
	for i := range ids {
		k := keys[i]
		cs[i] = cmds{
			meta:    pipe.HMGet(ctx, k.Meta, "left", "total", "limit"),
			pending: pipe.HLen(ctx, k.Reserved),
			done:    pipe.HLen(ctx, k.Outcomes),
			ttl:     pipe.PTTL(ctx, k.Meta),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("stock snapshots: %w", err)
	}
	out := make([]Snapshot, len(ids))
	for i, id := range ids {
		s := Snapshot{SessionID: id.Session, PrizeID: id.Prize, Left: -1}
		vals := cs[i].meta.Val()
		if len(vals) == 3 && vals[0] != nil {
			s.Loaded = true
			s.Left = toInt(vals[0])
			s.Total = toInt(vals[1])
			s.Limit = toInt(vals[2])
			s.TTLMillis = cs[i].ttl.Val().Milliseconds()
		}
		s.Pending = cs[i].pending.Val()
		s.Settled = cs[i].done.Val()
		out[i] = s
	}
	return out, nil
}

func toInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
