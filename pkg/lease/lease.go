// Package lease makes one process at a time the actor for a job, with a lease row in MySQL:
// a random token so only the holder can renew or release it, and a fencing number that
// grows with every acquisition. Writes the holder makes check the number (Fence.Check, and
// the fenced Redis scripts and MySQL statements that take it), so a holder that was paused
// past its expiry while another took over cannot act on what it read before.
//
// The lease lives in MySQL, not Redis: Redis is the store a data loss wipes, and a fencing
// number that resets to 1 after a loss fences nothing.
package lease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// ErrLost is the cause of Do's work context when a renewal failed: another holder may act.
var ErrLost = errors.New("lease lost")

// ErrStale is returned by Fence.Check when a newer holder has taken the lease.
var ErrStale = errors.New("stale fence: another holder took the lease")

// Lease is a named lease in the leases table.
type Lease struct {
	db   *gorm.DB
	name string
	ttl  time.Duration
}

// New returns the lease called name with the given time to live (renewed every ttl/3 while
// held by Do).
func New(db *gorm.DB, name string, ttl time.Duration) *Lease {
	return &Lease{db: db, name: name, ttl: ttl}
}

// Fence is one acquisition of a lease: the number every write made under it carries.
type Fence struct {
	Name   string
	Number int64
	lease  *Lease
}

// Check returns ErrStale unless no one acquired the lease since this fence was drawn. A
// holder whose lease merely expired, with no one else taking it, is still current: nobody
// else can have acted.
func (f Fence) Check(ctx context.Context) error {
	if f.lease == nil {
		return errors.New("fence: not drawn from a lease")
	}
	var cur int64
	if err := f.lease.db.WithContext(ctx).Raw("SELECT fence FROM leases WHERE name = ?", f.Name).Row().Scan(&cur); err != nil {
		return fmt.Errorf("check fence of lease %s: %w", f.Name, err)
	}
	if cur != f.Number {
		return fmt.Errorf("lease %s: fence %d, current %d: %w", f.Name, f.Number, cur, ErrStale)
	}
	return nil
}

// Held is a held lease.
type Held struct {
	Token string
	Fence Fence
}

func (l *Lease) micros() int64 { return l.ttl.Microseconds() }

// TryAcquire takes the lease if it is free or expired, drawing the next fencing number in
// the same statement; ok is false when someone else holds it.
func (l *Lease) TryAcquire(ctx context.Context) (Held, bool, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return Held{}, false, fmt.Errorf("lease token: %w", err)
	}
	token := hex.EncodeToString(b)
	db := l.db.WithContext(ctx)
	if err := db.Exec("INSERT IGNORE INTO leases (name, expires_at) VALUES (?, '1970-01-02')", l.name).Error; err != nil {
		return Held{}, false, fmt.Errorf("acquire lease %s: %w", l.name, err)
	}
	res := db.Exec(`UPDATE leases SET holder = ?, fence = fence + 1, acquired_at = NOW(6),
		expires_at = NOW(6) + INTERVAL ? MICROSECOND WHERE name = ? AND expires_at < NOW(6)`, token, l.micros(), l.name)
	if res.Error != nil {
		return Held{}, false, fmt.Errorf("acquire lease %s: %w", l.name, res.Error)
	}
	if res.RowsAffected != 1 {
		return Held{}, false, nil
	}
	var n int64
	if err := db.Raw("SELECT fence FROM leases WHERE name = ? AND holder = ?", l.name, token).Row().Scan(&n); err != nil {
		return Held{}, false, fmt.Errorf("acquire lease %s: read fence: %w", l.name, err)
	}
	return Held{Token: token, Fence: Fence{Name: l.name, Number: n, lease: l}}, true, nil
}

// Renew extends a held lease; false means it was lost (another holder drew a newer fence).
func (l *Lease) Renew(ctx context.Context, h Held) (bool, error) {
	res := l.db.WithContext(ctx).Exec(`UPDATE leases SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
		WHERE name = ? AND holder = ? AND fence = ?`, l.micros(), l.name, h.Token, h.Fence.Number)
	if res.Error != nil {
		return false, fmt.Errorf("renew lease %s: %w", l.name, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Release frees a held lease (it expires now and forgets its holder); it never frees a
// lease someone else holds. Clearing the holder matters: a renewal cancelled on the client
// may still run on the server after the release, and it must not bring the lease back for a
// whole TTL. The fencing number stays: the next holder draws a higher one.
func (l *Lease) Release(ctx context.Context, h Held) error {
	if err := l.db.WithContext(ctx).Exec(`UPDATE leases SET holder = '', expires_at = NOW(6) - INTERVAL 1 MICROSECOND
		WHERE name = ? AND holder = ? AND fence = ?`, l.name, h.Token, h.Fence.Number).Error; err != nil {
		return fmt.Errorf("release lease %s: %w", l.name, err)
	}
	return nil
}

// Holder returns the current holder's token and fence ("" when free or expired).
func (l *Lease) Holder(ctx context.Context) (string, int64, error) {
	var token string
	var fence int64
	err := l.db.WithContext(ctx).Raw("SELECT holder, fence FROM leases WHERE name = ? AND expires_at >= NOW(6)", l.name).
		Row().Scan(&token, &fence)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("lease %s holder: %w", l.name, err)
	}
	return token, fence, nil
}

// Do runs work while holding the lease, renewing it in the background. It returns
// acquired=false without running work when another process holds the lease. If a renewal
// fails, work's context is cancelled with ErrLost as its cause, so work stops acting; writes
// it is already making are refused by their fence checks.
func (l *Lease) Do(ctx context.Context, work func(ctx context.Context, fence Fence) error) (acquired bool, err error) {
	return do(ctx, l, l.ttl, work)
}

// row is what Do needs of the lease's row: a *Lease, or in a unit test of Do's timing a fake
// the test controls (the expiry itself is judged by MySQL's clock, which no fake can be).
type row interface {
	TryAcquire(ctx context.Context) (Held, bool, error)
	Renew(ctx context.Context, h Held) (bool, error)
	Release(ctx context.Context, h Held) error
}

// do is Do's timing: renew every ttl/3, give one renewal at most ttl/3, and cancel work on
// the first renewal refused, failed or timed out. So work's context ends at most two thirds
// of a TTL after the tick of the last renewal MySQL accepted, a third of a TTL before that
// renewal can expire and another holder take the lease: the margin work has to stop in. A
// holder that overruns it (a pause) is the fence's to refuse.
func do(ctx context.Context, r row, ttl time.Duration, work func(ctx context.Context, fence Fence) error) (acquired bool, err error) {
	h, ok, err := r.TryAcquire(ctx)
	if err != nil || !ok {
		return false, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				rctx, rcancel := context.WithTimeout(wctx, ttl/3)
				ok, err := r.Renew(rctx, h)
				rcancel()
				if err != nil || !ok {
					cancel(fmt.Errorf("%w: renewal: ok=%v err=%v", ErrLost, ok, err))
					return
				}
			}
		}
	}()
	err = work(wctx, h.Fence)
	cancel(nil)
	<-done
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer rcancel()
	if rerr := r.Release(rctx, h); rerr != nil && err == nil {
		err = rerr
	}
	if cause := context.Cause(wctx); errors.Is(cause, ErrLost) && err == nil {
		err = cause
	}
	return true, err
}
