package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Draw is one session×prize's draw record (migration 0015): what package draw commits,
// freezes and reveals. Seed and SaltKey are secrets until the reveal (SaltKey for ever):
// only the draw package and the reconciler read them.
type Draw struct {
	SessionID, PrizeID int64
	Phase              string // committed, frozen or drawn
	Seed               [32]byte
	SaltKey            [32]byte
	Commitment         string
	// The entry window, [start, end): the session's start and the prize's entry window.
	EntryWindowStart, EntryWindowEnd time.Time
	// The beacon named at the commitment (Round 0: none) and its signature once supplied.
	BeaconScheme, BeaconPublicKey string
	BeaconRound                   uint64
	BeaconSignature               string
	Entries                       int
	MerkleRoot                    string
	Cutoff                        int
	Skipped                       []int
	CreatedAt                     time.Time
	FrozenAt, DrawnAt             *time.Time
}

type drawRow struct {
	SessionID        int64 `gorm:"primaryKey"`
	PrizeID          int64 `gorm:"primaryKey"`
	Phase            string
	Seed             []byte
	SaltKey          []byte
	Commitment       string
	EntryWindowStart time.Time
	EntryWindowEnd   time.Time
	BeaconScheme     *string
	BeaconPublicKey  *string
	BeaconRound      *uint64
	BeaconSignature  *string
	Entries          int
	MerkleRoot       *string
	Cutoff           int
	SkippedPlaces    *string
	Fence            int64
	CreatedAt        time.Time
	FrozenAt         *time.Time
	DrawnAt          *time.Time
}

func (drawRow) TableName() string { return "draws" }

func (r drawRow) domain() (Draw, error) {
	d := Draw{SessionID: r.SessionID, PrizeID: r.PrizeID, Phase: r.Phase, Commitment: r.Commitment,
		EntryWindowStart: r.EntryWindowStart.UTC(), EntryWindowEnd: r.EntryWindowEnd.UTC(), Entries: r.Entries, Cutoff: r.Cutoff, CreatedAt: r.CreatedAt.UTC(),
		FrozenAt: utcPtr(r.FrozenAt), DrawnAt: utcPtr(r.DrawnAt)}
	if len(r.Seed) != 32 || len(r.SaltKey) != 32 {
		return Draw{}, fmt.Errorf("draw of session %d prize %d: seed or salt key is not 32 bytes", r.SessionID, r.PrizeID)
	}
	copy(d.Seed[:], r.Seed)
	copy(d.SaltKey[:], r.SaltKey)
	d.BeaconScheme, d.BeaconPublicKey, d.BeaconSignature, d.MerkleRoot =
		deref(r.BeaconScheme), deref(r.BeaconPublicKey), deref(r.BeaconSignature), deref(r.MerkleRoot)
	if r.BeaconRound != nil {
		d.BeaconRound = *r.BeaconRound
	}
	if r.SkippedPlaces != nil && *r.SkippedPlaces != "" {
		if err := json.Unmarshal([]byte(*r.SkippedPlaces), &d.Skipped); err != nil {
			return Draw{}, fmt.Errorf("draw of session %d prize %d: skipped places: %w", r.SessionID, r.PrizeID, err)
		}
	}
	return d, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// DrawEntry is one entrant of a draw.
type DrawEntry struct {
	User      string
	Salt      [16]byte
	EnteredAt time.Time
	Early     int64
	LeafIndex int // -1 before the freeze
	Place     int // 0 before the draw
	Value     [32]byte
	State     string // entered, won, skipped or waitlisted
}

type drawEntryRow struct {
	SessionID    int64  `gorm:"primaryKey"`
	PrizeID      int64  `gorm:"primaryKey"`
	UserID       string `gorm:"primaryKey"`
	Salt         []byte
	EnteredAt    time.Time
	Early        int64
	LeafIndex    *int
	Place        *int
	RankingValue []byte
	State        string
}

func (drawEntryRow) TableName() string { return "draw_entries" }

func (r drawEntryRow) domain() DrawEntry {
	e := DrawEntry{User: r.UserID, EnteredAt: r.EnteredAt.UTC(), Early: r.Early, LeafIndex: -1, State: r.State}
	copy(e.Salt[:], r.Salt)
	if r.LeafIndex != nil {
		e.LeafIndex = *r.LeafIndex
	}
	if r.Place != nil {
		e.Place = *r.Place
	}
	copy(e.Value[:], r.RankingValue)
	return e
}

// Draws stores the fair sale's draws and their entrants (package draw decides what goes in).
type Draws struct {
	db  *gorm.DB
	now func() time.Time
}

// NewDraws returns the draws on db.
func NewDraws(db *gorm.DB, now func() time.Time) *Draws { return &Draws{db: db, now: now} }

// DrawPrize is a session×prize whose prize gives its units by a draw, with its entry window.
type DrawPrize struct {
	seckill.SessionPrize
	Window time.Duration
}

// DrawPrizes returns the session×prizes of the given sessions whose prize is a draw's.
func (d *Draws) DrawPrizes(ctx context.Context, sessionIDs ...int64) ([]DrawPrize, error) {
	if len(sessionIDs) == 0 {
		return nil, nil
	}
	var rows []struct {
		SessionID, PrizeID, EntryWindowMs int64
	}
	err := d.db.WithContext(ctx).Table("session_stocks AS s").
		Select("s.session_id, s.prize_id, p.entry_window_ms").
		Joins("JOIN prizes p ON p.id = s.prize_id").
		Where("s.session_id IN ? AND p.admission = ?", sessionIDs, string(seckill.AdmissionDraw)).
		Order("s.session_id, s.prize_id").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("draw prizes: %w", err)
	}
	out := make([]DrawPrize, len(rows))
	for i, r := range rows {
		out[i] = DrawPrize{SessionPrize: seckill.SessionPrize{Session: r.SessionID, Prize: r.PrizeID},
			Window: time.Duration(r.EntryWindowMs) * time.Millisecond}
	}
	return out, nil
}

func drawsOf(rows []drawRow) ([]Draw, error) {
	out := make([]Draw, 0, len(rows))
	for _, r := range rows {
		dr, err := r.domain()
		if err != nil {
			return nil, err
		}
		out = append(out, dr)
	}
	return out, nil
}

func entriesOf(rows []drawEntryRow) []DrawEntry {
	out := make([]DrawEntry, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out
}

// Commit creates a draw's record in phase committed, unless it exists: a record once
// created keeps its seed (a second preheat must not draw a new one after the first was
// published). It returns the record as stored.
func (d *Draws) Commit(ctx context.Context, dr Draw) (Draw, error) {
	row := drawRow{SessionID: dr.SessionID, PrizeID: dr.PrizeID, Phase: "committed", Seed: dr.Seed[:], SaltKey: dr.SaltKey[:],
		Commitment: dr.Commitment, EntryWindowStart: dr.EntryWindowStart.UTC(), EntryWindowEnd: dr.EntryWindowEnd.UTC(),
		CreatedAt: d.now().UTC()}
	if dr.BeaconRound != 0 {
		row.BeaconScheme, row.BeaconPublicKey, row.BeaconRound = &dr.BeaconScheme, &dr.BeaconPublicKey, &dr.BeaconRound
	}
	if err := d.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return Draw{}, fmt.Errorf("commit draw of session %d prize %d: %w", dr.SessionID, dr.PrizeID, err)
	}
	return d.Draw(ctx, dr.SessionID, dr.PrizeID)
}

// Draw returns one draw's record; seckill.ErrNotFound when there is none.
func (d *Draws) Draw(ctx context.Context, sessionID, prizeID int64) (Draw, error) {
	var row drawRow
	if err := first(d.db.WithContext(ctx).Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &row); err != nil {
		return Draw{}, fmt.Errorf("draw of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return row.domain()
}

// Due returns the draws with work for the reconciler at now: committed ones whose window
// has closed, frozen ones (but those still waiting for their beacon round's signature), and
// drawn ones whose waitlist is not empty, of sessions that end
// after since (older sessions' waitlists are over).
func (d *Draws) Due(ctx context.Context, now, since time.Time) ([]Draw, error) {
	var rows []drawRow
	err := d.db.WithContext(ctx).Table("draws AS d").Select("d.*").
		Joins("JOIN sessions s ON s.id = d.session_id").
		Where("s.ends_at > ? AND ((d.phase = 'committed' AND d.entry_window_end <= ?) OR (d.phase = 'frozen' AND (d.beacon_round IS NULL OR d.beacon_signature IS NOT NULL)) OR (d.phase = 'drawn' AND d.cutoff < d.entries))",
			since.UTC(), now.UTC()).
		Order("d.entry_window_end, d.session_id, d.prize_id").Limit(1000).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("draws due: %w", err)
	}
	return drawsOf(rows)
}

// Live returns the draws of sessions that end after since and whose window has opened by
// now: their keys' phase must be restored should a rebuild recreate them without it.
func (d *Draws) Live(ctx context.Context, now, since time.Time) ([]Draw, error) {
	var rows []drawRow
	err := d.db.WithContext(ctx).Table("draws AS d").Select("d.*").
		Joins("JOIN sessions s ON s.id = d.session_id").
		Where("s.ends_at > ? AND d.entry_window_start <= ?", since.UTC(), now.UTC()).
		Order("d.entry_window_end, d.session_id, d.prize_id").Limit(1000).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("live draws: %w", err)
	}
	return drawsOf(rows)
}

// SaveEntries writes entrants of a committed draw (the freeze's first step), under fence.
// An entrant already stored keeps its row: a freeze repeated after a crash adds only what
// the first did not write.
func (d *Draws) SaveEntries(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []DrawEntry) error {
	for lo := 0; lo < len(entries); lo += 1000 {
		batch := entries[lo:min(lo+1000, len(entries))]
		rows := make([]drawEntryRow, len(batch))
		for i, e := range batch {
			rows[i] = drawEntryRow{SessionID: sessionID, PrizeID: prizeID, UserID: e.User, Salt: e.Salt[:],
				EnteredAt: e.EnteredAt.UTC(), Early: e.Early, State: "entered"}
		}
		err := fenced(ctx, d.db, f, func(tx *gorm.DB) error {
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error
		})
		if err != nil {
			return fmt.Errorf("save entries of session %d prize %d: %w", sessionID, prizeID, err)
		}
	}
	return nil
}

// Entries returns every entrant of a draw, ordered by user id.
func (d *Draws) Entries(ctx context.Context, sessionID, prizeID int64) ([]DrawEntry, error) {
	var rows []drawEntryRow
	err := d.db.WithContext(ctx).Where("session_id = ? AND prize_id = ?", sessionID, prizeID).
		Order("user_id").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("entries of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return entriesOf(rows), nil
}

// Entry returns one entrant; seckill.ErrNotFound when user did not enter.
func (d *Draws) Entry(ctx context.Context, sessionID, prizeID int64, user string) (DrawEntry, error) {
	var row drawEntryRow
	err := first(d.db.WithContext(ctx).Where("session_id = ? AND prize_id = ? AND user_id = ?", sessionID, prizeID, user), &row)
	if err != nil {
		return DrawEntry{}, fmt.Errorf("entry of %s in session %d prize %d: %w", user, sessionID, prizeID, err)
	}
	return row.domain(), nil
}

// Freeze records the frozen entry set, under fence: every entrant's leaf index (entries
// carry them), then the count and the Merkle root, and the phase frozen. Only a committed
// draw is frozen; a repeat of a freeze that completed changes nothing.
func (d *Draws) Freeze(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []DrawEntry, root string) error {
	if err := d.setPositions(ctx, f, sessionID, prizeID, entries, false); err != nil {
		return err
	}
	now := d.now().UTC()
	return fenced(ctx, d.db, f, func(tx *gorm.DB) error {
		res := tx.Model(&drawRow{}).Where("session_id = ? AND prize_id = ? AND phase = 'committed'", sessionID, prizeID).
			Updates(map[string]any{"phase": "frozen", "entries": len(entries), "merkle_root": root, "frozen_at": now, "fence": f.Number})
		if res.Error != nil {
			return fmt.Errorf("freeze draw of session %d prize %d: %w", sessionID, prizeID, res.Error)
		}
		return nil
	})
}

// Rank records every entrant's place and ranking value (entries carry them), under fence,
// each waitlisted until the admission offers it a unit.
func (d *Draws) Rank(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []DrawEntry) error {
	return d.setPositions(ctx, f, sessionID, prizeID, entries, true)
}

// setPositions writes the leaf indexes (ranked false) or the places, values and state
// waitlisted (ranked true) of entries that already exist, in batches of one statement each.
// A place another row holds from an earlier, interrupted write is cleared first within the
// same statement's batch ordering: places are only ever written from one ranking, so a
// repeat writes the same value to the same row.
func (d *Draws) setPositions(ctx context.Context, f lease.Fence, sessionID, prizeID int64, entries []DrawEntry, ranked bool) error {
	for lo := 0; lo < len(entries); lo += 1000 {
		batch := entries[lo:min(lo+1000, len(entries))]
		rows := make([]drawEntryRow, len(batch))
		for i, e := range batch {
			rows[i] = drawEntryRow{SessionID: sessionID, PrizeID: prizeID, UserID: e.User, Salt: e.Salt[:],
				EnteredAt: e.EnteredAt.UTC(), Early: e.Early, State: "entered"}
			if ranked {
				place := e.Place
				rows[i].Place, rows[i].RankingValue, rows[i].State = &place, append([]byte(nil), e.Value[:]...), "waitlisted"
			} else {
				idx := e.LeafIndex
				rows[i].LeafIndex = &idx
			}
		}
		cols := []string{"leaf_index"}
		if ranked {
			cols = []string{"place", "ranking_value", "state"}
		}
		err := fenced(ctx, d.db, f, func(tx *gorm.DB) error {
			q := tx.Clauses(clause.OnConflict{DoUpdates: clause.AssignmentColumns(cols)})
			if ranked {
				// A row whose state moved past waitlisted (won, skipped) keeps it: ranking
				// again after a crash must not put a winner back on the waitlist.
				q = tx.Clauses(clause.OnConflict{DoUpdates: clause.Assignments(map[string]any{
					"place":         gorm.Expr("VALUES(place)"),
					"ranking_value": gorm.Expr("VALUES(ranking_value)"),
					"state":         gorm.Expr("IF(state = 'entered', VALUES(state), state)"),
				})})
			}
			return q.Create(&rows).Error
		})
		if err != nil {
			return fmt.Errorf("record positions of session %d prize %d: %w", sessionID, prizeID, err)
		}
	}
	return nil
}

// Ranked returns the entrants of a ranked draw from place from (1-based) on, at most limit,
// in rank order.
func (d *Draws) Ranked(ctx context.Context, sessionID, prizeID int64, from, limit int) ([]DrawEntry, error) {
	var rows []drawEntryRow
	err := d.db.WithContext(ctx).Where("session_id = ? AND prize_id = ? AND place >= ?", sessionID, prizeID, from).
		Order("place").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("ranked entries of session %d prize %d: %w", sessionID, prizeID, err)
	}
	return entriesOf(rows), nil
}

// Values returns the ranking values of a ranked draw in rank order (the public record's).
func (d *Draws) Values(ctx context.Context, sessionID, prizeID int64) ([][32]byte, error) {
	var vals [][]byte
	err := d.db.WithContext(ctx).Model(&drawEntryRow{}).Where("session_id = ? AND prize_id = ? AND place IS NOT NULL", sessionID, prizeID).
		Order("place").Pluck("ranking_value", &vals).Error
	if err != nil {
		return nil, fmt.Errorf("ranking values of session %d prize %d: %w", sessionID, prizeID, err)
	}
	out := make([][32]byte, len(vals))
	for i, v := range vals {
		copy(out[i][:], v)
	}
	return out, nil
}

// Offer records, under fence, that the places up to cutoff have been offered a unit: won
// are the users the stock gate admitted, skipped the places it refused. The cutoff only
// grows, and the draw becomes drawn (revealed) with its first offer.
func (d *Draws) Offer(ctx context.Context, f lease.Fence, sessionID, prizeID int64, cutoff int, won []string, skipped []int) error {
	now := d.now().UTC()
	return fenced(ctx, d.db, f, func(tx *gorm.DB) error {
		var row drawRow
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("session_id = ? AND prize_id = ?", sessionID, prizeID).
			First(&row).Error; err != nil {
			return fmt.Errorf("offer in draw of session %d prize %d: %w", sessionID, prizeID, err)
		}
		cur, err := row.domain()
		if err != nil {
			return err
		}
		if cur.Phase == "committed" {
			return fmt.Errorf("offer in draw of session %d prize %d: not frozen: %w", sessionID, prizeID, seckill.ErrConflict)
		}
		if len(won) > 0 {
			if err := tx.Model(&drawEntryRow{}).Where("session_id = ? AND prize_id = ? AND user_id IN ?", sessionID, prizeID, won).
				Update("state", "won").Error; err != nil {
				return fmt.Errorf("winners of session %d prize %d: %w", sessionID, prizeID, err)
			}
		}
		if len(skipped) > 0 {
			if err := tx.Model(&drawEntryRow{}).Where("session_id = ? AND prize_id = ? AND place IN ?", sessionID, prizeID, skipped).
				Update("state", "skipped").Error; err != nil {
				return fmt.Errorf("skipped places of session %d prize %d: %w", sessionID, prizeID, err)
			}
		}
		all := mergePlaces(cur.Skipped, skipped)
		b, err := json.Marshal(all)
		if err != nil {
			return err
		}
		skippedJSON := string(b)
		upd := map[string]any{"cutoff": max(cur.Cutoff, cutoff), "skipped_places": skippedJSON, "fence": f.Number}
		if cur.Phase == "frozen" {
			upd["phase"], upd["drawn_at"] = "drawn", now
		}
		return tx.Model(&drawRow{}).Where("session_id = ? AND prize_id = ?", sessionID, prizeID).Updates(upd).Error
	})
}

// mergePlaces is the sorted union of two sorted lists of places.
func mergePlaces(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// SetBeaconSignature stores the beacon round's signature an operator supplied (checked by
// the caller against the beacon's public key), once: a different one for a draw that has it
// is seckill.ErrConflict.
func (d *Draws) SetBeaconSignature(ctx context.Context, sessionID, prizeID int64, signature string) error {
	signature = strings.ToLower(signature) // hex: the same signature in either case
	res := d.db.WithContext(ctx).Model(&drawRow{}).
		Where("session_id = ? AND prize_id = ? AND beacon_round IS NOT NULL AND (beacon_signature IS NULL OR beacon_signature = ?)",
			sessionID, prizeID, signature).
		Update("beacon_signature", signature)
	if res.Error != nil {
		return fmt.Errorf("beacon of session %d prize %d: %w", sessionID, prizeID, res.Error)
	}
	if res.RowsAffected == 0 {
		if _, err := d.Draw(ctx, sessionID, prizeID); err != nil {
			return err
		}
		var cur drawRow
		if err := first(d.db.WithContext(ctx).Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &cur); err == nil &&
			cur.BeaconSignature != nil && *cur.BeaconSignature == signature {
			return nil // the same signature again (MySQL counts an unchanged row as unaffected)
		}
		return fmt.Errorf("beacon of session %d prize %d: no beacon named, or another signature stored: %w",
			sessionID, prizeID, seckill.ErrConflict)
	}
	return nil
}

// DrawCounts is how a draw's entrants stand, for the operator's page.
type DrawCounts struct {
	ByState map[string]int // entered, won, skipped, waitlisted
	Early   int64          // refused entries before the window, summed over the entrants
}

// Counts counts a draw's stored entrants by state.
func (d *Draws) Counts(ctx context.Context, sessionID, prizeID int64) (DrawCounts, error) {
	var rows []struct {
		State string
		N     int
		Early int64
	}
	err := d.db.WithContext(ctx).Model(&drawEntryRow{}).Select("state, COUNT(*) AS n, COALESCE(SUM(early), 0) AS early").
		Where("session_id = ? AND prize_id = ?", sessionID, prizeID).Group("state").Scan(&rows).Error
	if err != nil {
		return DrawCounts{}, fmt.Errorf("count entries of session %d prize %d: %w", sessionID, prizeID, err)
	}
	c := DrawCounts{ByState: map[string]int{}}
	for _, r := range rows {
		c.ByState[r.State] = r.N
		c.Early += r.Early
	}
	return c, nil
}
