package draw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// publicBook is what the public side reads of the system of record: a *store.Draws.
type publicBook interface {
	Draw(ctx context.Context, sessionID, prizeID int64) (store.Draw, error)
	Entries(ctx context.Context, sessionID, prizeID int64) ([]store.DrawEntry, error)
	Entry(ctx context.Context, sessionID, prizeID int64, user string) (store.DrawEntry, error)
	Values(ctx context.Context, sessionID, prizeID int64) ([][32]byte, error)
}

// Public is the draw as the gateway shows it: the public record, an entrant's proof and
// an entrant's standing for a status poll. Frozen trees are cached (they never change), and
// records for a short while.
type Public struct {
	book    publicBook
	entries *Entries
	now     func() time.Time
	ttl     time.Duration

	mu      sync.Mutex
	trees   map[seckill.SessionPrize]*Tree
	records map[seckill.SessionPrize]cachedRecord
	// values are the ranking values of drawn draws: fixed by the ranking, the bulk of a
	// record (a million entrants: a million rows), read from MySQL once per gateway.
	values map[seckill.SessionPrize][][32]byte
}

type cachedRecord struct {
	rec Record
	at  time.Time
}

// maxCached bounds each cache: a gateway serves the draws of the sessions around now.
const maxCached = 16

// NewPublic returns the public side of the draws in b (entries: their Redis side, for the
// standing during the window). A drawn record is served from memory for up to ttl.
func NewPublic(b *store.Draws, entries *Entries, ttl time.Duration, now func() time.Time) *Public {
	return &Public{book: b, entries: entries, now: now, ttl: ttl,
		trees: map[seckill.SessionPrize]*Tree{}, records: map[seckill.SessionPrize]cachedRecord{},
		values: map[seckill.SessionPrize][][32]byte{}}
}

// Record returns a draw's public record: the commitment from the preheat on, the count and
// root from the freeze on, the seed, beacon and ranking values from the draw on.
// seckill.ErrNotFound when the session×prize has no draw (yet).
func (p *Public) Record(ctx context.Context, sessionID, prizeID int64) (Record, error) {
	key := seckill.SessionPrize{Session: sessionID, Prize: prizeID}
	p.mu.Lock()
	c, ok := p.records[key]
	p.mu.Unlock()
	if ok && p.now().Sub(c.at) < p.ttl {
		return c.rec, nil
	}
	d, err := p.book.Draw(ctx, sessionID, prizeID)
	if err != nil {
		return Record{}, err
	}
	rec, err := p.record(ctx, d)
	if err != nil {
		return Record{}, err
	}
	// Every phase is cached: a crowd reloading the record page must not become a crowd of
	// MySQL reads; a phase shows at most ttl late.
	p.mu.Lock()
	if len(p.records) >= maxCached {
		clear(p.records)
	}
	p.records[key] = cachedRecord{rec: rec, at: p.now()}
	p.mu.Unlock()
	return rec, nil
}

// RecordOf is the public part of a stored draw, with its ranking values once drawn.
func RecordOf(d store.Draw, values [][32]byte) (Record, error) {
	rec := Record{SessionID: d.SessionID, PrizeID: d.PrizeID, Phase: Phase(d.Phase), Commitment: d.Commitment,
		EntryWindowEnd: d.EntryWindowEnd}
	if d.BeaconRound != 0 {
		rec.Beacon = &BeaconRef{Scheme: d.BeaconScheme, PublicKey: d.BeaconPublicKey, Round: d.BeaconRound}
	}
	if rec.Phase == PhaseCommitted {
		return rec, nil
	}
	rec.Entries, rec.Root, rec.FrozenAt = d.Entries, d.MerkleRoot, d.FrozenAt
	if rec.Phase == PhaseFrozen {
		return rec, nil
	}
	rec.Seed = Seed(d.Seed).String()
	if rec.Beacon != nil {
		sig, err := hex.DecodeString(d.BeaconSignature)
		if err != nil {
			return Record{}, fmt.Errorf("draw of session %d prize %d: stored beacon signature: %w", d.SessionID, d.PrizeID, err)
		}
		v := sha256.Sum256(sig)
		rec.Beacon.Signature, rec.Beacon.Value = d.BeaconSignature, hex.EncodeToString(v[:])
	}
	rec.Values = make([]string, len(values))
	for i, v := range values {
		rec.Values[i] = hex.EncodeToString(v[:])
	}
	rec.Cutoff, rec.Skipped = d.Cutoff, d.Skipped
	return rec, nil
}

func (p *Public) record(ctx context.Context, d store.Draw) (Record, error) {
	var values [][32]byte
	if d.Phase == string(PhaseDrawn) {
		key := seckill.SessionPrize{Session: d.SessionID, Prize: d.PrizeID}
		p.mu.Lock()
		values = p.values[key]
		p.mu.Unlock()
		if values == nil {
			var err error
			if values, err = p.book.Values(ctx, d.SessionID, d.PrizeID); err != nil {
				return Record{}, err
			}
			p.mu.Lock()
			if len(p.values) >= maxCached {
				clear(p.values)
			}
			p.values[key] = values
			p.mu.Unlock()
		}
	}
	return RecordOf(d, values)
}

// ErrNotFrozen is Proof's answer before the freeze: there is no tree to prove a place in.
var ErrNotFrozen = errors.New("the entry set is not frozen yet")

// Proof returns user's proof: their entry's audit path in the frozen tree, and their
// ranking value and place once drawn. seckill.ErrNotFound when user did not enter (or
// there is no draw); ErrNotFrozen before the freeze.
func (p *Public) Proof(ctx context.Context, sessionID, prizeID int64, user string) (Proof, error) {
	d, err := p.book.Draw(ctx, sessionID, prizeID)
	if err != nil {
		return Proof{}, err
	}
	if d.Phase == string(PhaseCommitted) {
		return Proof{}, ErrNotFrozen
	}
	e, err := p.book.Entry(ctx, sessionID, prizeID, user)
	if err != nil {
		return Proof{}, err
	}
	t, err := p.tree(ctx, sessionID, prizeID)
	if err != nil {
		return Proof{}, err
	}
	pr, ok := t.ProofOf(user)
	if !ok {
		return Proof{}, fmt.Errorf("entry of %s in session %d prize %d is stored but not in the frozen tree: %w",
			user, sessionID, prizeID, seckill.ErrConflict)
	}
	if d.Phase == string(PhaseDrawn) && e.Place > 0 {
		pr.Value, pr.Place = hex.EncodeToString(e.Value[:]), e.Place
	}
	return pr, nil
}

// tree is the frozen tree of a draw, built once per gateway from the stored entrants.
func (p *Public) tree(ctx context.Context, sessionID, prizeID int64) (*Tree, error) {
	key := seckill.SessionPrize{Session: sessionID, Prize: prizeID}
	p.mu.Lock()
	t, ok := p.trees[key]
	p.mu.Unlock()
	if ok {
		return t, nil
	}
	all, err := p.book.Entries(ctx, sessionID, prizeID)
	if err != nil {
		return nil, err
	}
	if t, err = treeOf(sessionID, prizeID, all); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if len(p.trees) >= maxCached {
		clear(p.trees)
	}
	p.trees[key] = t
	p.mu.Unlock()
	return t, nil
}

// Status is an entrant's standing, as a status poll shows it.
type Status struct {
	State            string // entered, won, waitlisted or skipped
	Place            int    // from the draw on
	WaitlistPosition int    // waitlisted: how many places are before theirs to be offered a unit
	PollAfter        time.Duration
	Reason           string // skipped: why the stock gate refused the place
}

// Entered reports whether user is in a draw's entry set in Redis: a poll during the window
// is answered from Redis alone, without MySQL.
func (p *Public) Entered(ctx context.Context, sessionID, prizeID int64, user string) (bool, error) {
	_, ok, err := p.entries.Entered(ctx, sessionID, prizeID, user)
	return ok, err
}

// Standing returns user's standing in a draw; false when user did not enter it.
func (p *Public) Standing(ctx context.Context, sessionID, prizeID int64, user string) (Status, bool, error) {
	d, err := p.book.Draw(ctx, sessionID, prizeID)
	if errors.Is(err, seckill.ErrNotFound) {
		return Status{}, false, nil
	}
	if err != nil {
		return Status{}, false, err
	}
	if d.Phase == string(PhaseCommitted) {
		_, ok, err := p.entries.Entered(ctx, sessionID, prizeID, user)
		if err != nil || !ok {
			return Status{}, false, err
		}
		return Status{State: "entered", PollAfter: p.pollAfter(d.EntryWindowEnd)}, true, nil
	}
	e, err := p.book.Entry(ctx, sessionID, prizeID, user)
	if errors.Is(err, seckill.ErrNotFound) {
		return Status{}, false, nil
	}
	if err != nil {
		return Status{}, false, err
	}
	st := Status{State: e.State, Place: e.Place}
	switch {
	case d.Phase == string(PhaseFrozen) || e.State == "entered":
		st.State, st.Place, st.PollAfter = "entered", 0, time.Second
	case e.State == "waitlisted":
		st.WaitlistPosition = e.Place - d.Cutoff
	case e.State == "skipped":
		st.Reason = string(seckill.ReasonLimit)
	}
	return st, true, nil
}

// pollAfter is how long after now an entrant should ask again: the window's end and a
// second for the draw, at least a second.
func (p *Public) pollAfter(windowEnd time.Time) time.Duration {
	return max(windowEnd.Sub(p.now())+time.Second, time.Second).Round(time.Second)
}

// PollAfter is pollAfter for the gateway's entry answer.
func (p *Public) PollAfter(windowEnd time.Time) time.Duration { return p.pollAfter(windowEnd) }
