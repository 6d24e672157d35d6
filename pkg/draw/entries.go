package draw

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
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

var (
	//go:embed lua/enter.lua
	enterSrc string
	//go:embed lua/phase.lua
	phaseSrc string
)

// The draw's phases as the stock gate's hash holds them (field 'draw'), moved only forward by SetPhase:
// the gateway reads them in Enter, the admission script refuses grabs until GateFirstCome.
const (
	GateEntering  = "entering" // the window takes entries
	GateDrawing   = "drawing"  // the entry set is frozen; the reconciler draws and admits winners
	GateWaitlist  = "waitlist" // drawn: a returned unit goes to the next waitlisted entrant
	GateFirstCome = "fcfs"     // drawn, nobody waits: what is left goes first come, first served
)

// keys are a draw's Redis keys: the stock gate's meta hash and fence (same hash tag, so one
// script touches one cluster slot) and the entry set and early-entry counts beside them.
type keys struct{ meta, fence, entries, early string }

func keysFor(sessionID, prizeID int64) keys {
	k := stock.KeysFor(sessionID, prizeID)
	tag := strings.TrimSuffix(k.Meta, "meta")
	return keys{meta: k.Meta, fence: k.Fence, entries: tag + "entries", early: tag + "early"}
}

// EnterCode is Enter's verdict.
type EnterCode int

// Enter's verdicts, as the entry script returns them.
const (
	Entered   EnterCode = iota // a new entry
	Again                      // the user had entered already; At is the first entry's time
	Early                      // before the window: refused and counted (EnterResult.Early)
	Closed                     // the window has closed; At is set when the user had entered
	NotArmed                   // the prize's keys are not loaded or not yet a draw's
	FirstCome                  // the draw is over: what is left goes to grabs
)

// EnterResult is what Enter did.
type EnterResult struct {
	Code  EnterCode
	At    time.Time // when the user entered (Entered, Again, and Closed for an entrant)
	Early int64     // the user's refused early entries so far (Early)
}

// Entries is a draw's Redis side: the entry set the gateway writes during the window and
// the reconciler freezes, and the phase both read.
type Entries struct {
	rdb   redis.UniversalClient
	enter *redis.Script
	phase *redis.Script
}

// NewEntries returns the entry set on rdb and loads its scripts.
func NewEntries(ctx context.Context, rdb redis.UniversalClient) (*Entries, error) {
	e := &Entries{rdb: rdb, enter: redis.NewScript(enterSrc), phase: redis.NewScript(phaseSrc)}
	for _, s := range []*redis.Script{e.enter, e.phase} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("load draw scripts: %w", err)
		}
	}
	return e, nil
}

// Enter records user's entry into the draw of a session×prize at now, in one round trip.
func (e *Entries) Enter(ctx context.Context, sessionID, prizeID int64, user string, now time.Time) (EnterResult, error) {
	k := keysFor(sessionID, prizeID)
	res, err := e.enter.Run(ctx, e.rdb, []string{k.meta, k.entries, k.early}, user, now.UnixMilli()).Slice()
	if err != nil {
		return EnterResult{}, fmt.Errorf("enter session %d prize %d: %w", sessionID, prizeID, err)
	}
	if len(res) != 2 {
		return EnterResult{}, fmt.Errorf("enter session %d prize %d: unexpected reply %v", sessionID, prizeID, res)
	}
	code, _ := res[0].(int64)
	detail, _ := res[1].(string)
	r := EnterResult{Code: EnterCode(code)}
	switch r.Code {
	case Entered, Again, Closed:
		if detail != "" {
			ms, err := strconv.ParseInt(detail, 10, 64)
			if err != nil {
				return EnterResult{}, fmt.Errorf("enter session %d prize %d: entry time %q: %w", sessionID, prizeID, detail, err)
			}
			r.At = time.UnixMilli(ms).UTC()
		}
	case Early:
		r.Early, _ = strconv.ParseInt(detail, 10, 64)
	case NotArmed, FirstCome:
	default:
		return EnterResult{}, fmt.Errorf("enter session %d prize %d: unknown code %d", sessionID, prizeID, code)
	}
	return r, nil
}

// ErrFenced is SetPhase's refusal: a reconciler with a newer fence wrote these keys.
var ErrFenced = stock.ErrFenced

// NoFence is SetPhase's fence for a caller without the lease (the preheat arming keys, the
// draw loop restoring a phase a rebuild lost): such a call sets a phase only where the keys
// hold none, so it needs none.
const NoFence int64 = -1

// SetPhase moves the draw's phase forward to phase (entering also sets the window [from,
// until)) under fence (NoFence: only where the keys hold no phase), and returns the phase the keys hold now (later than phase when
// another run moved it further). seckill.ErrNotLoaded when the prize's keys are absent.
func (e *Entries) SetPhase(ctx context.Context, sessionID, prizeID, fence int64, phase string, from, until time.Time) (string, error) {
	k := keysFor(sessionID, prizeID)
	f := any(fence)
	if fence == NoFence {
		f = "-"
	}
	v, err := e.phase.Run(ctx, e.rdb, []string{k.meta, k.fence}, f, phase, from.UnixMilli(), until.UnixMilli()).Result()
	if err != nil {
		return "", fmt.Errorf("draw phase %s of session %d prize %d: %w", phase, sessionID, prizeID, err)
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		if v == -2 {
			return "", fmt.Errorf("draw phase %s of session %d prize %d: %w", phase, sessionID, prizeID, ErrFenced)
		}
		return "", fmt.Errorf("draw phase %s of session %d prize %d: %w", phase, sessionID, prizeID, seckill.ErrNotLoaded)
	}
	return "", fmt.Errorf("draw phase %s of session %d prize %d: unexpected reply %v", phase, sessionID, prizeID, v)
}

// Phase returns the draw's phase as the keys hold it ("" when not armed or not loaded).
func (e *Entries) Phase(ctx context.Context, sessionID, prizeID int64) (string, error) {
	v, err := e.rdb.HGet(ctx, keysFor(sessionID, prizeID).meta, "draw").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("draw phase of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return v, nil
}

// Left returns the units the prize's keys hold (false when not loaded): the draw loop asks
// before offering places to the waitlist, so a waitlist with no returned unit costs a read.
func (e *Entries) Left(ctx context.Context, sessionID, prizeID int64) (int64, bool, error) {
	v, err := e.rdb.HGet(ctx, keysFor(sessionID, prizeID).meta, "left").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("units left of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return v, true, nil
}

// Entrant is one entry as Redis holds it.
type Entrant struct {
	User  string
	At    time.Time
	Early int64 // refused entries before the window
}

// Scan reads the whole entry set (and each entrant's early count) in pages, so a set of a
// million entries does not block Redis for one long command. Call it once the phase is
// drawing: the set no longer changes.
func (e *Entries) Scan(ctx context.Context, sessionID, prizeID int64) ([]Entrant, error) {
	k := keysFor(sessionID, prizeID)
	var out []Entrant
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, k.entries, cursor, "", 2000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan entries of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			ms, err := strconv.ParseInt(kv[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("entry of %q in session %d prize %d: %w", kv[i], sessionID, prizeID, err)
			}
			out = append(out, Entrant{User: kv[i], At: time.UnixMilli(ms).UTC()})
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	// HSCAN may return an element more than once: keep each user once.
	seen := make(map[string]int, len(out))
	uniq := out[:0]
	for _, en := range out {
		if _, dup := seen[en.User]; !dup {
			seen[en.User] = len(uniq)
			uniq = append(uniq, en)
		}
	}
	if len(uniq) == 0 {
		return uniq, nil
	}
	users := make([]string, len(uniq))
	for i, en := range uniq {
		users[i] = en.User
	}
	for lo := 0; lo < len(users); lo += 2000 {
		hi := min(lo+2000, len(users))
		counts, err := e.rdb.HMGet(ctx, k.early, users[lo:hi]...).Result()
		if err != nil {
			return nil, fmt.Errorf("early entries of session %d prize %d: %w", sessionID, prizeID, err)
		}
		for i, c := range counts {
			if s, ok := c.(string); ok {
				uniq[lo+i].Early, _ = strconv.ParseInt(s, 10, 64)
			}
		}
	}
	return uniq, nil
}

// Entered reports whether user is in the entry set (for a status poll before the freeze).
func (e *Entries) Entered(ctx context.Context, sessionID, prizeID int64, user string) (time.Time, bool, error) {
	v, err := e.rdb.HGet(ctx, keysFor(sessionID, prizeID).entries, user).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("entry of session %d prize %d: %w", sessionID, prizeID, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("entry time %q: %w", v, err)
	}
	return time.UnixMilli(ms).UTC(), true, nil
}
