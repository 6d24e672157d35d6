// Package load drives a request function in a closed loop (fixed concurrency, as fast as
// answers come back) or an open loop (a fixed arrival rate, whatever the answers), bounded
// by count and time, and summarises throughput and latency.
//
// In the open loop a request's latency is measured from when it was due (start + i/rate),
// not from when the generator got round to sending it: a stalled server delays the sends
// behind it, and timing from the send would hide exactly that queueing (coordinated
// omission). How many requests started late is reported too.
package load

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request performs request i and returns its status (an HTTP code, or any small integer
// the caller chooses) or an error.
type Request func(ctx context.Context, i int) (int, error)

// Options bound a run.
type Options struct {
	Requests    int
	Concurrency int           // workers (closed) or max in flight (open)
	Rate        float64       // requests per second; 0 = closed loop
	MaxDuration time.Duration // stop after this long whatever is left
	Progress    io.Writer     // a terminal to draw a progress bar on, or nil

	// sleep waits for the next due time (false when ctx ended); tests stall the generator
	// with it.
	sleep func(ctx context.Context, d time.Duration) bool
}

// Summary is what a run measured.
type Summary struct {
	Mode         string         `json:"mode"`
	Requests     int            `json:"requests"`
	Errors       int            `json:"errors"`
	Seconds      float64        `json:"seconds"`
	ThroughputPS float64        `json:"throughput_per_s"`
	P50ms        float64        `json:"p50_ms"`
	P90ms        float64        `json:"p90_ms"`
	P99ms        float64        `json:"p99_ms"`
	P999ms       float64        `json:"p999_ms"`
	MaxMs        float64        `json:"max_ms"`
	Codes        map[string]int `json:"codes"`
	// Open loop only: requests sent more than LateAfter after they were due (their latency
	// includes the wait), and requests not sent at all because Concurrency were in flight
	// (counted in Errors too: the offered rate was not kept).
	Late      int `json:"late,omitempty"`
	Saturated int `json:"saturated,omitempty"`
}

// LateAfter is how far behind its due time a request may start before it counts as late.
const LateAfter = time.Millisecond

// String is a one-line summary.
func (s Summary) String() string {
	line := fmt.Sprintf("%s loop: %d requests in %.2fs = %.0f/s; latency p50 %.2fms p90 %.2fms p99 %.2fms p99.9 %.2fms max %.2fms; errors %d; codes %v",
		s.Mode, s.Requests, s.Seconds, s.ThroughputPS, s.P50ms, s.P90ms, s.P99ms, s.P999ms, s.MaxMs, s.Errors, s.Codes)
	if s.Mode == "open" {
		line += fmt.Sprintf("; started late %d, not sent (saturated) %d; latency timed from the schedule", s.Late, s.Saturated)
	}
	return line
}

type result struct {
	status    int
	latency   time.Duration
	err       bool
	done      bool
	late      bool
	saturated bool
}

// Run drives req according to o.
func Run(ctx context.Context, o Options, req Request) Summary {
	if o.MaxDuration <= 0 {
		o.MaxDuration = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.MaxDuration)
	defer cancel()
	now, sleep := time.Now, o.sleep
	if sleep == nil {
		sleep = func(ctx context.Context, d time.Duration) bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
	}
	results := make([]result, o.Requests)
	var done atomic.Int64
	// fire times request i from due: its send time in the closed loop, its scheduled time
	// in the open loop.
	fire := func(i int, due time.Time) {
		late := now().Sub(due) > LateAfter
		code, err := req(ctx, i)
		results[i] = result{status: code, latency: now().Sub(due), err: err != nil, done: true, late: late}
		done.Add(1)
	}
	stop := progress(o.Progress, &done, o.Requests)
	start := now()
	var wg sync.WaitGroup
	mode := "closed"
	if o.Rate <= 0 {
		var next atomic.Int64
		for range o.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					i := int(next.Add(1) - 1)
					if i >= o.Requests {
						return
					}
					fire(i, now())
				}
			}()
		}
	} else {
		mode = "open"
		sem := make(chan struct{}, o.Concurrency)
		// Request i is due at start + i/rate: sleeping until each due time (and firing at once
		// when behind) keeps the offered rate exact where a ticker could not fire that often.
		interval := time.Duration(float64(time.Second) / o.Rate)
	loop:
		for i := 0; i < o.Requests; i++ {
			due := start.Add(time.Duration(i) * interval)
			if wait := due.Sub(now()); wait > 0 {
				if !sleep(ctx, wait) {
					break loop
				}
			} else if ctx.Err() != nil {
				break loop
			}
			select {
			case sem <- struct{}{}:
			default:
				// The generator saturated: count it as an error rather than wait (which would
				// silently lower the offered rate).
				results[i] = result{err: true, done: true, saturated: true}
				done.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				fire(i, due)
			}()
		}
	}
	wg.Wait()
	elapsed := now().Sub(start)
	stop()
	return summarize(mode, results, elapsed)
}

// Quantile is the q-quantile of sorted (ascending) by the rank every latency figure of the
// bench uses: the element at floor(q·n), the last one at most; 0 for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func summarize(mode string, rs []result, elapsed time.Duration) Summary {
	s := Summary{Mode: mode, Seconds: elapsed.Seconds(), Codes: map[string]int{}}
	lat := make([]float64, 0, len(rs))
	for _, r := range rs {
		if !r.done {
			continue
		}
		s.Requests++
		if r.late {
			s.Late++
		}
		if r.saturated {
			s.Saturated++
		}
		if r.err {
			s.Errors++
			continue
		}
		s.Codes[strconv.Itoa(r.status)]++
		lat = append(lat, float64(r.latency.Microseconds())/1000)
	}
	if elapsed > 0 {
		s.ThroughputPS = float64(len(lat)) / elapsed.Seconds()
	}
	sort.Float64s(lat)
	s.P50ms, s.P90ms, s.P99ms, s.P999ms = Quantile(lat, .5), Quantile(lat, .9), Quantile(lat, .99), Quantile(lat, .999)
	if len(lat) > 0 {
		s.MaxMs = lat[len(lat)-1]
	}
	return s
}

// progress draws a bar when w is a terminal; it returns a function that stops it.
func progress(w io.Writer, done *atomic.Int64, total int) func() {
	f, ok := w.(*os.File)
	if !ok || total == 0 {
		return func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	stop, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			n := min(int(done.Load()), total)
			fmt.Fprintf(f, "\r[%s%s] %d/%d", strings.Repeat("#", n*30/total), strings.Repeat(".", 30-n*30/total), n, total)
			select {
			case <-stop:
				fmt.Fprintln(f)
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop); <-finished }
}
