package draw

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// book is what the draw keeps in the system of record: a *store.Draws.
type book interface {
	DrawPrizes(ctx context.Context, sessionIDs ...int64) ([]store.DrawPrize, error)
	Commit(ctx context.Context, dr store.Draw) (store.Draw, error)
	Draw(ctx context.Context, sessionID, prizeID int64) (store.Draw, error)
	Due(ctx context.Context, now, since time.Time) ([]store.Draw, error)
	Live(ctx context.Context, now, since time.Time) ([]store.Draw, error)
	SaveEntries(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []store.DrawEntry) error
	Entries(ctx context.Context, sessionID, prizeID int64) ([]store.DrawEntry, error)
	Freeze(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []store.DrawEntry, root string) error
	Rank(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []store.DrawEntry) error
	Ranked(ctx context.Context, sessionID, prizeID int64, from, limit int) ([]store.DrawEntry, error)
	Offer(ctx context.Context, f lease.Fence, sessionID, prizeID int64, cutoff int, won []string, skipped []int) error
}

// admitter is the stock gate's admission, the same script a grab goes through (its batch
// form: a page of winners in one round trip, judged in rank order).
type admitter interface {
	ReserveAll(ctx context.Context, grabs []seckill.Grab) ([]stock.Verdict, error)
}

// producer writes the winners' grab events (the grab topic's writer).
type producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// BeaconConfig names the randomness beacon new draws commit to: a drand network's scheme
// and public key, and how far after the entry window's end the committed round is
// published (Period: the network's round length; Genesis: its first round's time). Zero
// value: no beacon, the seed alone ranks.
type BeaconConfig struct {
	Scheme, PublicKey string
	Genesis           time.Time
	Period            time.Duration
}

// On reports whether draws commit to a beacon round.
func (b BeaconConfig) On() bool { return b.Scheme != "" }

// BeaconMargin is how long after a window's end the committed beacon round comes: the
// freeze must be done before the round is published (its value must be unknown when the
// entry set is fixed), and a freeze waits for the draw loop's tick, or for a lease a killed
// reconciler left to expire. The record publishes frozen_at, so anyone can check it.
const BeaconMargin = time.Minute

// RoundAfter is the first round of the beacon published after t (drand's round numbering:
// round 1 at genesis).
func (b BeaconConfig) RoundAfter(t time.Time) uint64 {
	if !t.After(b.Genesis) || b.Period <= 0 {
		return 1
	}
	return uint64(t.Sub(b.Genesis)/b.Period) + 2
}

// Armer commits draws and arms their keys at preheat (the gateway's admin preheat and the
// reconciler's both call it).
type Armer struct {
	book    book
	entries *Entries
	beacon  BeaconConfig
}

// NewArmer returns the preheat's part of the draw.
func NewArmer(b *store.Draws, e *Entries, beacon BeaconConfig) *Armer {
	return &Armer{book: b, entries: e, beacon: beacon}
}

// Runner is the draw's side of the reconciler: it commits draws at preheat, freezes entry
// sets when windows close, ranks, admits winners in rank order through the stock gate and
// moves the waitlist when units come back. Every write carries the caller's lease fence.
type Runner struct {
	*Armer
	gate  admitter
	grabs producer
	// checker checks a beacon's signature (NewDrand of the draw's scheme and key; tests
	// may use a LocalBeacon's network).
	checker func(scheme, publicKey string) (BeaconChecker, error)
	grace   time.Duration // a session's draws stay due until its end + grace
	page    int           // places offered per round of admissions
	log     *slog.Logger
	now     func() time.Time
}

// RunnerConfig is what a Runner is made of.
type RunnerConfig struct {
	Book    *store.Draws
	Entries *Entries
	Gate    *stock.Gate
	Grabs   producer
	Beacon  BeaconConfig
	Grace   time.Duration
	Page    int // places offered per round of admissions (0: 500)
	Log     *slog.Logger
	Now     func() time.Time
}

// NewRunner returns the reconciler's draw runner.
func NewRunner(c RunnerConfig) *Runner {
	page := c.Page
	if page <= 0 {
		page = defaultPage
	}
	return &Runner{Armer: NewArmer(c.Book, c.Entries, c.Beacon), gate: c.Gate, grabs: c.Grabs, grace: c.Grace, page: page,
		log: c.Log, now: c.Now, checker: func(scheme, pk string) (BeaconChecker, error) { return NewDrand(scheme, pk) }}
}

// Arm commits the draws of a session's draw prizes and marks their keys as a draw's
// (phase entering, with the window from the session's start): called by the preheat, after
// the stock is loaded and before the session opens. A draw committed earlier keeps its
// seed; arming keys already past entering changes nothing.
func (r *Armer) Arm(ctx context.Context, s seckill.Session) (int, error) {
	prizes, err := r.book.DrawPrizes(ctx, s.ID)
	if err != nil {
		return 0, err
	}
	for _, p := range prizes {
		end := s.Start.Add(p.Window)
		if _, err := r.commit(ctx, p.Session, p.Prize, s.Start, end); err != nil {
			return 0, err
		}
		if _, err := r.entries.SetPhase(ctx, p.Session, p.Prize, NoFence, GateEntering, s.Start, end); err != nil {
			return 0, err
		}
	}
	return len(prizes), nil
}

// commit creates the draw's record with a fresh seed and salt key, unless it exists.
func (r *Armer) commit(ctx context.Context, sessionID, prizeID int64, windowStart, windowEnd time.Time) (store.Draw, error) {
	seed, err := NewSeed(rand.Reader)
	if err != nil {
		return store.Draw{}, err
	}
	var saltKey [32]byte
	if _, err := rand.Read(saltKey[:]); err != nil {
		return store.Draw{}, fmt.Errorf("draw salt key: %w", err)
	}
	dr := store.Draw{SessionID: sessionID, PrizeID: prizeID, Seed: seed, SaltKey: saltKey, Commitment: seed.Commitment(),
		EntryWindowStart: windowStart, EntryWindowEnd: windowEnd}
	if r.beacon.On() {
		dr.BeaconScheme, dr.BeaconPublicKey, dr.BeaconRound = r.beacon.Scheme, r.beacon.PublicKey, r.beacon.RoundAfter(windowEnd.Add(BeaconMargin))
	}
	return r.book.Commit(ctx, dr)
}

// Report is what one Run did, summed over the draws it touched.
type Report struct {
	Frozen, Drawn, Admitted, Skipped, Waiting, AwaitingBeacon int64
}

// Restore puts back the phase of the live draws whose keys hold none: a Redis data loss
// whose keys the rebuild job recreated from MySQL without it. Until then the gateway
// answers entries "not loaded" and the admission script would not know the units are the
// draw's. The phase follows MySQL: entering while the window is open, drawing once it has
// closed (until the draw), waitlist while entrants wait, fcfs after. It sets a phase only
// where none is (SetPhase with NoFence), so it needs no lease and never moves one; keys not
// rebuilt yet are left for the next call. It returns how many draws' keys it restored.
func (r *Armer) Restore(ctx context.Context, now, since time.Time) (int, error) {
	live, err := r.book.Live(ctx, now, since)
	if err != nil {
		return 0, err
	}
	restored := 0
	for _, d := range live {
		phase, err := r.entries.Phase(ctx, d.SessionID, d.PrizeID)
		if err != nil || phase != "" {
			continue
		}
		want := GateDrawing
		switch {
		case d.Phase == "committed" && now.Before(d.EntryWindowEnd):
			want = GateEntering
		case d.Phase == "drawn" && d.Cutoff < d.Entries:
			want = GateWaitlist
		case d.Phase == "drawn":
			want = GateFirstCome
		}
		if _, err := r.entries.SetPhase(ctx, d.SessionID, d.PrizeID, NoFence, want, d.EntryWindowStart, d.EntryWindowEnd); err == nil {
			restored++
		}
	}
	return restored, nil
}

// Due reports whether any draw has work now (read outside the lease: the draw loop takes
// the lease only when it does).
func (r *Runner) Due(ctx context.Context) (bool, error) {
	now := r.now()
	due, err := r.book.Due(ctx, now, now.Add(-r.grace))
	return len(due) > 0, err
}

// Run does every due draw's next steps under fence: freeze the windows that closed, rank
// and admit winners, offer returned units down the waitlists. One draw's failure does not
// stop the others; the errors are joined.
func (r *Runner) Run(ctx context.Context, fence lease.Fence) (Report, error) {
	var rep Report
	now := r.now()
	due, err := r.book.Due(ctx, now, now.Add(-r.grace))
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, d := range due {
		if err := r.step(ctx, fence, d, &rep); err != nil {
			errs = append(errs, err)
			if errors.Is(err, lease.ErrStale) || errors.Is(err, ErrFenced) {
				break // the lease moved on: the next holder finishes
			}
		}
	}
	return rep, errors.Join(errs...)
}

func (r *Runner) step(ctx context.Context, fence lease.Fence, d store.Draw, rep *Report) error {
	var err error
	if d.Phase == "committed" {
		if err := r.freeze(ctx, fence, d); err != nil {
			return err
		}
		rep.Frozen++
		if d, err = r.book.Draw(ctx, d.SessionID, d.PrizeID); err != nil { // its count and root
			return err
		}
	}
	if d.Phase == "frozen" {
		ok, err := r.rank(ctx, fence, d)
		if err != nil || !ok {
			if !ok && err == nil {
				rep.AwaitingBeacon++
			}
			return err
		}
		rep.Drawn++
	}
	return r.admit(ctx, fence, d, rep)
}

// SaltFor is an entrant's salt: HMAC-SHA256(salt key, user id), its first 16 bytes. Derived
// rather than drawn, so a freeze repeated after a crash builds the same tree; keyed by a
// secret never published, so nobody can recompute another user's leaf.
func SaltFor(saltKey [32]byte, user string) Salt {
	m := hmac.New(sha256.New, saltKey[:])
	m.Write([]byte(user))
	var s Salt
	copy(s[:], m.Sum(nil))
	return s
}

// freeze closes the entry set in Redis (no entry is taken after it, whatever a gateway's
// clock says), copies it to MySQL (adding to what an interrupted freeze wrote: an entry once
// stored stays in the set), builds the Merkle tree and records its root and count. Nothing
// random is known outside before this is stored.
func (r *Runner) freeze(ctx context.Context, fence lease.Fence, d store.Draw) error {
	if _, err := r.entries.SetPhase(ctx, d.SessionID, d.PrizeID, fence.Number, GateDrawing, time.Time{}, d.EntryWindowEnd); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	ents, err := r.entries.Scan(ctx, d.SessionID, d.PrizeID)
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	rows := make([]store.DrawEntry, len(ents))
	for i, e := range ents {
		rows[i] = store.DrawEntry{User: e.User, Salt: SaltFor(d.SaltKey, e.User), EnteredAt: e.At, Early: e.Early}
	}
	if err := r.book.SaveEntries(ctx, fence, d.SessionID, d.PrizeID, rows); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	all, err := r.book.Entries(ctx, d.SessionID, d.PrizeID)
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	tree, err := treeOf(d.SessionID, d.PrizeID, all)
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	for i := range all {
		all[i].LeafIndex, _ = tree.Index(all[i].User)
	}
	root := tree.Root()
	if err := r.book.Freeze(ctx, fence, d.SessionID, d.PrizeID, all, hex.EncodeToString(root[:])); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	r.log.InfoContext(ctx, "draw frozen", "session_id", d.SessionID, "prize_id", d.PrizeID, "entries", len(all),
		"merkle_root", hex.EncodeToString(root[:]))
	return nil
}

// treeOf builds the frozen set's tree from the stored entrants.
func treeOf(sessionID, prizeID int64, all []store.DrawEntry) (*Tree, error) {
	es := make([]Entry, len(all))
	for i, e := range all {
		es[i] = Entry{User: e.User, Salt: Salt(e.Salt)}
	}
	return Freeze(sessionID, prizeID, es)
}

// rank computes every entrant's ranking value and place and stores them; false (and no
// error) while the draw waits for its beacon round's signature.
func (r *Runner) rank(ctx context.Context, fence lease.Fence, d store.Draw) (bool, error) {
	var beaconValue []byte
	if d.BeaconRound != 0 {
		if d.BeaconSignature == "" {
			return false, nil
		}
		v, err := r.beaconValue(d)
		if err != nil {
			return false, fmt.Errorf("draw of session %d prize %d: %w", d.SessionID, d.PrizeID, err)
		}
		beaconValue = v
	}
	all, err := r.book.Entries(ctx, d.SessionID, d.PrizeID)
	if err != nil {
		return false, err
	}
	users := make([]string, len(all))
	byUser := make(map[string]int, len(all))
	for i, e := range all {
		users[i] = e.User
		byUser[e.User] = i
	}
	for _, rk := range Rank(Key(Seed(d.Seed), beaconValue), users) {
		e := &all[byUser[rk.User]]
		e.Place, e.Value = rk.Place, rk.Value
	}
	if err := r.book.Rank(ctx, fence, d.SessionID, d.PrizeID, all); err != nil {
		return false, err
	}
	return true, nil
}

// beaconValue checks the stored signature of the draw's beacon round and returns its value.
func (r *Runner) beaconValue(d store.Draw) ([]byte, error) {
	c, err := r.checker(d.BeaconScheme, d.BeaconPublicKey)
	if err != nil {
		return nil, fmt.Errorf("beacon: %w", err)
	}
	return c.Check(BeaconRef{Scheme: d.BeaconScheme, PublicKey: d.BeaconPublicKey, Round: d.BeaconRound, Signature: d.BeaconSignature})
}

// defaultPage is how many places one round of admissions offers by default.
const defaultPage = 500

// admit offers units in rank order from the place after the cutoff, through the stock
// gate's admission script under the winner's draw request id, until the gate is out of
// units or every entrant was offered one. An admitted winner's grab event goes to Kafka
// like a grab's (the stale job re-publishes it if this write fails); the offer is recorded
// after the admissions, so a run killed in between repeats them, and the script answers
// "seen" for each: no winner is admitted twice, none skipped. When nobody is left waiting,
// the keys' phase becomes first come, first served for what is left.
func (r *Runner) admit(ctx context.Context, fence lease.Fence, d store.Draw, rep *Report) error {
	cutoff := d.Cutoff
	if d.Phase == "drawn" {
		// The waitlist: nothing to offer until a unit came back.
		left, loaded, err := r.entries.Left(ctx, d.SessionID, d.PrizeID)
		if err != nil {
			return err
		}
		if loaded && left <= 0 {
			rep.Waiting += int64(d.Entries - cutoff)
			return nil
		}
	}
	for {
		page, err := r.book.Ranked(ctx, d.SessionID, d.PrizeID, cutoff+1, r.page)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		var won []string
		var skipped []int
		var events []kafka.Message
		soldOut := false
		last := cutoff
		grabs := make([]seckill.Grab, len(page))
		for i, e := range page {
			grabs[i] = seckill.Grab{RequestID: seckill.DrawRequestID(d.SessionID, d.PrizeID, e.User), UserID: e.User,
				SessionID: d.SessionID, PrizeID: d.PrizeID, AdmittedAt: r.now()}
		}
		verdicts, err := r.gate.ReserveAll(ctx, grabs)
		if err != nil {
			return fmt.Errorf("admit places %d to %d of session %d prize %d: %w", page[0].Place, page[len(page)-1].Place,
				d.SessionID, d.PrizeID, err)
		}
		for i, e := range page {
			g, v := grabs[i], verdicts[i]
			switch v.Code {
			case stock.Admitted:
				rep.Admitted++
			case stock.Seen:
				// Admitted by an earlier, interrupted run: publish again while it may still be
				// only in Redis (the consumer dedupes by request id).
				if v.State.State != "queued" {
					won, last = append(won, e.User), e.Place
					continue
				}
			case stock.Limit:
				rep.Skipped++
				skipped, last = append(skipped, e.Place), e.Place
				continue
			case stock.SoldOut:
				soldOut = true
			case stock.NotLoaded:
				return fmt.Errorf("admit place %d of session %d prize %d: %w", e.Place, d.SessionID, d.PrizeID, seckill.ErrNotLoaded)
			default:
				return fmt.Errorf("admit place %d of session %d prize %d: verdict %s", e.Place, d.SessionID, d.PrizeID, v.Code)
			}
			if soldOut {
				break // the places after it were judged sold out too: they wait for a returned unit
			}
			m, err := event.EncodeGrab(g)
			if err != nil {
				return fmt.Errorf("encode the grab of place %d: %w", e.Place, err)
			}
			events = append(events, m)
			won, last = append(won, e.User), e.Place
		}
		if len(events) > 0 {
			if err := r.grabs.WriteMessages(ctx, events...); err != nil {
				// Admitted in Redis, not yet an event: the offer is not recorded, so the next
				// run repeats the page, the script answers "seen" (queued) for these winners
				// and their events are written again. Recorded now, the winners would rest on
				// their reservations alone, which a Redis loss before the stale job's turn
				// would take with them.
				return fmt.Errorf("write %d winners' grab events of session %d prize %d: %w", len(events), d.SessionID, d.PrizeID, err)
			}
		}
		if last > cutoff {
			if err := r.book.Offer(ctx, fence, d.SessionID, d.PrizeID, last, won, skipped); err != nil {
				return err
			}
			cutoff = last
		}
		if soldOut {
			break
		}
	}
	if d.Phase != "drawn" && cutoff == d.Cutoff {
		// Nothing offered (no unit, or no entrant): the draw is still revealed.
		if err := r.book.Offer(ctx, fence, d.SessionID, d.PrizeID, cutoff, nil, nil); err != nil {
			return err
		}
	}
	phase := GateWaitlist
	if cutoff >= d.Entries {
		phase = GateFirstCome
	}
	if _, err := r.entries.SetPhase(ctx, d.SessionID, d.PrizeID, fence.Number, phase, time.Time{}, d.EntryWindowEnd); err != nil {
		return err
	}
	waiting := int64(d.Entries - cutoff)
	rep.Waiting += waiting
	return nil
}
