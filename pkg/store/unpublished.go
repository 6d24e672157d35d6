package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Unpublished records, per gateway, the admitted grabs whose events Kafka has not
// acknowledged yet, and answers the reconciler's question "may a lost prize be rebuilt?"
// (see migration 0006).
type Unpublished struct {
	db *gorm.DB
}

// NewUnpublished returns the store of gateways' unpublished grabs.
func NewUnpublished(db *gorm.DB) *Unpublished { return &Unpublished{db: db} }

// AdmissionInDoubt is how long a gateway's admission call must have been in flight before
// its report counts it as a held grab, and how much later than its since Quiet wants a
// report stamped. A call in flight when the report is sampled whose script admitted a grab
// before the keys were lost started before since, so it is at least this old by then;
// younger calls reached Redis after the loss (not loaded) and are not counted, so a crowd
// retrying its 503s cannot keep a prize from ever looking quiet. It is far above an
// admission round trip and well below the heartbeat interval.
const AdmissionInDoubt = 500 * time.Millisecond

// PrizeCount is how many unpublished grabs a gateway holds for one session×prize.
type PrizeCount struct {
	SessionID, PrizeID int64
	Pending            int
}

// Report beats gateway's heartbeat at MySQL's clock, then calls sample for its counts and
// replaces its rows with them (an empty slice clears them), in one transaction.
//
// The stamp comes before the sample, never after: Quiet trusts a report stamped after its
// since to cover every grab held at since. A sample taken before the stamp could predate
// since (the reconciler reading its clock between the two) and miss a grab held meanwhile,
// while its stamp says "after". Stamped first, the counts are at least as new as beat_at;
// the commit may come later, which only makes the report look older than it is.
func (u *Unpublished) Report(ctx context.Context, gateway string, sample func() []PrizeCount) error {
	err := u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO gateway_heartbeats (gateway, beat_at) VALUES (?, NOW(6))
			ON DUPLICATE KEY UPDATE beat_at = NOW(6)`, gateway).Error; err != nil {
			return err
		}
		counts := sample()
		if err := tx.Exec("DELETE FROM gateway_unpublished WHERE gateway = ?", gateway).Error; err != nil {
			return err
		}
		for _, c := range counts {
			if c.Pending <= 0 {
				continue
			}
			if err := tx.Exec("INSERT INTO gateway_unpublished (gateway, session_id, prize_id, pending) VALUES (?, ?, ?, ?)",
				gateway, c.SessionID, c.PrizeID, c.Pending).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("report unpublished grabs of gateway %s: %w", gateway, err)
	}
	return nil
}

// Leave removes a gateway that stopped cleanly (it published or handed over everything).
func (u *Unpublished) Leave(ctx context.Context, gateway string) error {
	err := u.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("DELETE FROM gateway_unpublished WHERE gateway = ?", gateway).Error; err != nil {
			return err
		}
		return tx.Exec("DELETE FROM gateway_heartbeats WHERE gateway = ?", gateway).Error
	})
	if err != nil {
		return fmt.Errorf("gateway %s leaves: %w", gateway, err)
	}
	return nil
}

// Now is MySQL's clock, the one heartbeats are stamped with.
func (u *Unpublished) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := u.db.WithContext(ctx).Raw("SELECT NOW(6)").Row().Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("mysql clock: %w", err)
	}
	return now, nil
}

// PrizeHold says what live and dead gateways hold for one session×prize.
type PrizeHold struct {
	Holding    int // live gateways that reported unpublished grabs of the prize
	NotYet     int // live gateways that have not reported since the asked time
	DeadUnsent int // unpublished grabs reported by gateways whose heartbeat stopped
}

// Quiet reports whether the prize may be rebuilt as far as gateways go: every gateway alive
// (heartbeat within alive) reported, stamped at least AdmissionInDoubt after since, holding
// nothing for the prize. Gateways whose heartbeat stopped are not waited for (their memory
// is gone with them); what they held is returned in DeadUnsent for the report.
func (u *Unpublished) Quiet(ctx context.Context, sessionID, prizeID int64, since time.Time, alive time.Duration) (bool, PrizeHold, error) {
	since = since.Add(AdmissionInDoubt)
	var rows []struct {
		Gateway string
		Fresh   bool
		Alive   bool
		Pending int
	}
	err := u.db.WithContext(ctx).Raw(`SELECT h.gateway, h.beat_at > ? AS fresh,
			h.beat_at >= NOW(6) - INTERVAL ? MICROSECOND AS alive, COALESCE(p.pending, 0) AS pending
		FROM gateway_heartbeats h
		LEFT JOIN gateway_unpublished p ON p.gateway = h.gateway AND p.session_id = ? AND p.prize_id = ?`,
		since, alive.Microseconds(), sessionID, prizeID).Scan(&rows).Error
	if err != nil {
		return false, PrizeHold{}, fmt.Errorf("gateways' unpublished grabs of session %d prize %d: %w", sessionID, prizeID, err)
	}
	var h PrizeHold
	for _, r := range rows {
		switch {
		case !r.Alive:
			h.DeadUnsent += r.Pending
		case !r.Fresh:
			h.NotYet++
		case r.Pending > 0:
			h.Holding++
		}
	}
	return h.Holding == 0 && h.NotYet == 0, h, nil
}

// Live returns how many gateways beat within alive, and how many admitted grabs Kafka has
// not acknowledged all gateways, live or not, last reported. A procedure that needs admission
// stopped (adding grab partitions) waits for no live gateway.
func (u *Unpublished) Live(ctx context.Context, alive time.Duration) (gateways int64, unpublished int64, err error) {
	err = u.db.WithContext(ctx).Raw(`SELECT
			(SELECT COUNT(*) FROM gateway_heartbeats WHERE beat_at >= NOW(6) - INTERVAL ? MICROSECOND),
			(SELECT COALESCE(SUM(pending), 0) FROM gateway_unpublished)`, alive.Microseconds()).Row().Scan(&gateways, &unpublished)
	if err != nil {
		return 0, 0, fmt.Errorf("live gateways: %w", err)
	}
	return gateways, unpublished, nil
}
