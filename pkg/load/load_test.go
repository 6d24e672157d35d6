package load

import (
	"context"
	"errors"
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
