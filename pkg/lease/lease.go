// Package lease makes one process at a time the actor for a job, with a Redis lease: a
// random token so only the holder can renew or release it, and a fencing number that grows
// with every acquisition so work stamped by an expired holder can be told apart.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquire sets the lease only if free and, in the same atomic step, draws the next fencing
// number. KEYS: 1 lease, 2 fence counter. ARGV: 1 token, 2 ttl ms.
var acquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// renew extends the lease only while this token holds it.
var renew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// release deletes the lease only while this token holds it. A plain DEL after the lease
// expired and another process took it would free someone else's lease: the bug behind a
// well-known oversold flash sale.
var release = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// ErrLost is returned by Run's work context cause when renewal failed: another holder may act.
var ErrLost = errors.New("lease lost")

// Lease is a named lease in Redis.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	fence string
	ttl   time.Duration
}

// New returns the lease called name with the given time to live (renewed every ttl/3 while
// held).
func New(rdb redis.UniversalClient, name string, ttl time.Duration) *Lease {
	return &Lease{rdb: rdb, key: "lease:{" + name + "}", fence: "lease:{" + name + "}:fence", ttl: ttl}
}

// Held is a held lease.
type Held struct {
	Token string
	Fence int64
}

// TryAcquire takes the lease if it is free; ok is false when someone else holds it.
func (l *Lease) TryAcquire(ctx context.Context) (Held, bool, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return Held{}, false, fmt.Errorf("lease token: %w", err)
	}
	token := hex.EncodeToString(b)
	n, err := acquire.Run(ctx, l.rdb, []string{l.key, l.fence}, token, l.ttl.Milliseconds()).Int64()
	if err != nil {
		return Held{}, false, fmt.Errorf("acquire lease %s: %w", l.key, err)
	}
	if n == 0 {
		return Held{}, false, nil
	}
	return Held{Token: token, Fence: n}, true, nil
}

// Renew extends a held lease; false means it was lost (expired and maybe retaken).
func (l *Lease) Renew(ctx context.Context, h Held) (bool, error) {
	n, err := renew.Run(ctx, l.rdb, []string{l.key}, h.Token, l.ttl.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release frees a held lease; it never frees a lease someone else holds.
func (l *Lease) Release(ctx context.Context, h Held) error {
	if err := release.Run(ctx, l.rdb, []string{l.key}, h.Token).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// Holder returns the current holder's token ("" when free).
func (l *Lease) Holder(ctx context.Context) (string, error) {
	v, err := l.rdb.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// Do runs work while holding the lease, renewing it in the background. It returns
// acquired=false without running work when another process holds the lease. If a renewal
// fails, work's context is cancelled with ErrLost as its cause, so work stops acting.
func (l *Lease) Do(ctx context.Context, work func(ctx context.Context, fence int64) error) (acquired bool, err error) {
	h, ok, err := l.TryAcquire(ctx)
	if err != nil || !ok {
		return false, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				rctx, rcancel := context.WithTimeout(wctx, l.ttl/3)
				ok, err := l.Renew(rctx, h)
				rcancel()
				if err != nil || !ok {
					cancel(fmt.Errorf("%w: %v", ErrLost, err))
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
	if rerr := l.Release(rctx, h); rerr != nil && err == nil {
		err = rerr
	}
	if cause := context.Cause(wctx); errors.Is(cause, ErrLost) && err == nil {
		err = cause
	}
	return true, err
}
