package load

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestClosedLoopCountsEverything(t *testing.T) {
	s := Run(context.Background(), Options{Requests: 1000, Concurrency: 8}, func(ctx context.Context, i int) (int, error) {
		if i%10 == 0 {
			return 0, errors.New("boom")
		}
		return 200 + i%2, nil
	})
	if s.Requests != 1000 || s.Errors != 100 || s.Codes["200"] != 400 || s.Codes["201"] != 500 || s.Mode != "closed" {
		t.Fatalf("%+v", s)
	}
}

func TestOpenLoopKeepsTheRate(t *testing.T) {
	s := Run(context.Background(), Options{Requests: 200, Concurrency: 50, Rate: 1000}, func(ctx context.Context, i int) (int, error) {
		time.Sleep(time.Millisecond)
		return 200, nil
	})
	// 200 requests at 1000/s take about 0.2s; far longer means the pacing is broken.
	if s.Requests != 200 || s.Seconds > 1 || s.Seconds < 0.15 {
		t.Fatalf("%+v", s)
	}
}

func TestPercentiles(t *testing.T) {
	rs := make([]result, 100)
	for i := range rs {
		rs[i] = result{status: 200, latency: time.Duration(i+1) * time.Millisecond, done: true}
	}
	s := summarize("closed", rs, time.Second)
	if s.P50ms != 51 || s.P99ms != 100 || s.MaxMs != 100 || s.ThroughputPS != 100 {
		t.Fatalf("%+v", s)
	}
}

// When the generator falls behind its schedule (here one of its sleeps overruns by 40 ms,
// as when it is descheduled on a busy machine), every request due meanwhile goes out late.
// Timed from the schedule, their latencies include that wait and they count as late; timed
// from the send (coordinated omission) they would read as fast as the others.
func TestOpenLoopTimesFromTheSchedule(t *testing.T) {
	var sleeps atomic.Int32
	stalling := func(ctx context.Context, d time.Duration) bool {
		if sleeps.Add(1) == 10 {
			d += 40 * time.Millisecond
		}
		time.Sleep(d)
		return true
	}
	s := Run(context.Background(), Options{Requests: 100, Concurrency: 1000, Rate: 1000, sleep: stalling},
		func(ctx context.Context, i int) (int, error) { return 200, nil })
	if s.Requests != 100 || s.Errors != 0 {
		t.Fatalf("%+v", s)
	}
	// About 40 requests were due during the stall; allow for a slow, shared machine.
	if s.Late < 30 || s.MaxMs < 35 {
		t.Fatalf("a 40 ms generator stall is invisible: late %d, max %.1f ms: %s", s.Late, s.MaxMs, s)
	}
}

// Saturation (every slot in flight) is reported, not hidden as a lower offered rate.
func TestOpenLoopReportsSaturation(t *testing.T) {
	s := Run(context.Background(), Options{Requests: 50, Concurrency: 1, Rate: 1000}, func(ctx context.Context, i int) (int, error) {
		time.Sleep(10 * time.Millisecond)
		return 200, nil
	})
	if s.Saturated == 0 || s.Errors != s.Saturated {
		t.Fatalf("saturation not reported: %+v", s)
	}
}

// A request started behind its due time is counted late and its latency includes the delay.
func TestLateStartsAreCountedAndTimedFromDue(t *testing.T) {
	rs := []result{{status: 200, latency: 30 * time.Millisecond, done: true, late: true},
		{status: 200, latency: time.Millisecond, done: true}}
	s := summarize("open", rs, time.Second)
	if s.Late != 1 || s.MaxMs != 30 {
		t.Fatalf("%+v", s)
	}
}
