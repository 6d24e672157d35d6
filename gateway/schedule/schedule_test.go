package schedule

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

type fakeSchedule struct{ err error }

func (f fakeSchedule) SessionsOverlapping(context.Context, time.Time, time.Time) ([]seckill.Session, error) {
	return nil, f.err
}

func (f fakeSchedule) Stocks(context.Context, ...int64) ([]seckill.Stock, error) { return nil, f.err }

// The "last good reload" time is what the schedule alert reads: it moves on a successful
// reload only, never on a failed one.
func TestScheduleReportsOnlySuccessfulReloads(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeSchedule{}
	c := New(src, time.Second, func() time.Time { return now })
	var loaded []time.Time
	c.OnLoaded = func(at time.Time) { loaded = append(loaded, at) }
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	src.err = errors.New("mysql down")
	now = now.Add(time.Minute)
	if err := c.Reload(context.Background()); err == nil {
		t.Fatal("reload with a failing source succeeded")
	}
	if len(loaded) != 1 || !loaded[0].Equal(now.Add(-time.Minute)) {
		t.Fatalf("onLoaded calls = %v, want one at the first reload", loaded)
	}
}
