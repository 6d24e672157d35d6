package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/pkg/lease"
)

// The runner's and the scheduler's timing, in synctest bubbles: the runner's clock is the
// bubble's time.Now, jobs "work" by sleeping on it, and a run of minutes takes no wall time.
// The lease is a fake with lease.Do's contract (its timing is pkg/lease's TestDo* tests').

// losingLeaser holds the lease for lostAfter, then loses it the way lease.Do does when a
// renewal is refused: work's context is cancelled with lease.ErrLost as its cause, and Do
// returns that cause.
type losingLeaser struct{ lostAfter time.Duration }

func (l losingLeaser) Do(ctx context.Context, work func(context.Context, lease.Fence) error) (bool, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := time.AfterFunc(l.lostAfter, func() {
		cancel(fmt.Errorf("%w: renewal: ok=false err=<nil>", lease.ErrLost))
	})
	defer stop.Stop()
	err := work(wctx, lease.Fence{Name: "test", Number: 7})
	if cause := context.Cause(wctx); errors.Is(cause, lease.ErrLost) && err == nil {
		err = cause
	}
	return true, err
}

// oneHolder is the lease shared by instances: Do finds it busy while another holds it.
type oneHolder struct {
	mu    sync.Mutex
	held  bool
	fence int64
}

func (h *oneHolder) Do(ctx context.Context, work func(context.Context, lease.Fence) error) (bool, error) {
	h.mu.Lock()
	if h.held {
		h.mu.Unlock()
		return false, nil
	}
	h.held = true
	h.fence++
	f := lease.Fence{Name: "test", Number: h.fence}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.held = false
		h.mu.Unlock()
	}()
	return true, work(ctx, f)
}

// sleepJob works for its durations in turn (the last one again once they run out),
// watching its context or not, and records when each run started and ended.
type sleepJob struct {
	name      string
	durations []time.Duration
	ignoreCtx bool // keeps working after its context ended, as a job mid-statement does

	mu     sync.Mutex
	runs   int
	active int
	spans  [][2]time.Time
}

func (j *sleepJob) Name() string { return j.name }

func (j *sleepJob) Run(ctx context.Context, _ lease.Fence) (result, error) {
	j.mu.Lock()
	d := j.durations[min(j.runs, len(j.durations)-1)]
	j.runs++
	j.active++
	overlap := j.active > 1
	start := time.Now()
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.active--
		j.spans = append(j.spans, [2]time.Time{start, time.Now()})
		j.mu.Unlock()
	}()
	if overlap {
		return result{}, errors.New("two runs at once")
	}
	if j.ignoreCtx {
		time.Sleep(d)
		return result{Summary: map[string]int64{"done": 1}}, nil
	}
	select {
	case <-time.After(d):
		return result{Summary: map[string]int64{"done": 1}}, nil
	case <-ctx.Done():
		return result{}, context.Cause(ctx)
	}
}

func (j *sleepJob) started(since time.Time) []time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []time.Duration
	for _, s := range j.spans {
		out = append(out, s[0].Sub(since))
	}
	return out
}

func testRunner(l leaser, jobs ...job) *runner {
	return &runner{lease: l, jobs: jobs, metrics: newRunnerMetrics(prometheus.NewRegistry()),
		log: slog.New(slog.DiscardHandler), now: time.Now}
}

// A lease lost mid-run stops the run: the job running when it is lost ends (at once if it
// watches its context, at its end if it does not), no later job starts, the report keeps
// what ran and the run counts as failed, with lease.ErrLost as its error.
func TestRunStopsWhenTheLeaseIsLostMidRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ignoreCtx bool
		wantMS    int64
	}{
		{"the job watches its context", false, 1000},
		{"the job finishes what it does", true, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := &sleepJob{name: "first", durations: []time.Duration{2 * time.Second}, ignoreCtx: tc.ignoreCtx}
				second := &sleepJob{name: "second", durations: []time.Duration{time.Second}}
				r := testRunner(losingLeaser{lostAfter: time.Second}, first, second)
				rep, err := r.runOnce(context.Background())
				if !errors.Is(err, lease.ErrLost) {
					t.Fatalf("runOnce: %v, want lease.ErrLost", err)
				}
				if second.runs != 0 {
					t.Fatal("a job started after the lease was lost")
				}
				if len(rep.Jobs) != 1 || rep.Jobs[0].Name != "first" || rep.Lease != "held" || rep.Fence != 7 {
					t.Fatalf("report %+v, want the first job only, under fence 7", rep)
				}
				if rep.DurationMS != tc.wantMS {
					t.Fatalf("run took %d ms, want %d", rep.DurationMS, tc.wantMS)
				}
				if wantErr := !tc.ignoreCtx; strings.Contains(rep.Jobs[0].Error, lease.ErrLost.Error()) != wantErr {
					t.Fatalf("first job's report %+v, want the loss as its error: %v", rep.Jobs[0], wantErr)
				}
				if n := testutil.ToFloat64(r.metrics.runs.WithLabelValues("failed")); n != 1 {
					t.Fatalf("failed runs %v, want 1", n)
				}
			})
		})
	}
}

// The scheduler runs one run at a time. Ticks that fall due while a run is still going are
// coalesced: however many passed, one run follows at once, and then the runs are back on
// the ticker's cadence (time.Ticker keeps at most one tick and drops the others).
func TestScheduleCoalescesRunsThatFellDueDuringALongOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 10 * time.Second
		start := time.Now()
		j := &sleepJob{name: "slow", durations: []time.Duration{25 * time.Second, 0}} // two ticks pass in the first
		r := testRunner(&oneHolder{}, j)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- schedule(ctx, r, every, r.log) }()
		time.Sleep(45 * time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, 25 * time.Second, 30 * time.Second, 40 * time.Second}
		if got := j.started(start); !slices.Equal(got, want) {
			t.Fatalf("runs started at %v, want %v: the ticks at 10s and 20s are one run, at 25s", got, want)
		}
		if n := testutil.ToFloat64(r.metrics.runs.WithLabelValues("ok")); n != 4 {
			t.Fatalf("ok runs %v, want 4 (none overlapped)", n)
		}
	})
}

// Two runs due at the same instant. In one process, the runner's run and a rebalance round
// share the lease through serialLeaser: they take turns, neither finds the other "busy", and
// the second starts when the first ends. In two processes (two reconcilers, one lease) one
// acts and the other reports the lease busy without running a job.
func TestRunsDueAtOnceDoNotOverlap(t *testing.T) {
	t.Run("one process: run and rebalance round take turns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			held := newSerialLeaser(&oneHolder{})
			j := &sleepJob{name: "reconcile", durations: []time.Duration{3 * time.Second}}
			r := testRunner(held, j)
			var round [2]time.Duration
			var wg sync.WaitGroup
			var runErr, roundErr error
			var runAcquired, roundAcquired bool
			wg.Go(func() {
				rep, err := r.runOnce(context.Background())
				runAcquired, runErr = rep.Lease == "held", err
			})
			wg.Go(func() {
				roundAcquired, roundErr = held.Do(context.Background(), func(ctx context.Context, _ lease.Fence) error {
					round[0] = time.Since(start)
					time.Sleep(2 * time.Second)
					round[1] = time.Since(start)
					return nil
				})
			})
			wg.Wait()
			if runErr != nil || roundErr != nil || !runAcquired || !roundAcquired {
				t.Fatalf("run: held %v, err %v; round: acquired %v, err %v; want both to hold the lease in turn",
					runAcquired, runErr, roundAcquired, roundErr)
			}
			runSpan := j.spans[0]
			run := [2]time.Duration{runSpan[0].Sub(start), runSpan[1].Sub(start)}
			// Whichever took the lock first, the other starts the instant it ends.
			if !(run == [2]time.Duration{0, 3 * time.Second} && round == [2]time.Duration{3 * time.Second, 5 * time.Second}) &&
				!(round == [2]time.Duration{0, 2 * time.Second} && run == [2]time.Duration{2 * time.Second, 5 * time.Second}) {
				t.Fatalf("run %v, round %v: they overlapped or waited", run, round)
			}
		})
	})
	t.Run("two processes: one acts, the other is busy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			shared := &oneHolder{}
			a := &sleepJob{name: "reconcile", durations: []time.Duration{3 * time.Second}}
			b := &sleepJob{name: "reconcile", durations: []time.Duration{3 * time.Second}}
			ra := testRunner(newSerialLeaser(shared), a)
			rb := testRunner(newSerialLeaser(shared), b)
			var repA, repB report
			var errA, errB error
			var wg sync.WaitGroup
			wg.Go(func() { repA, errA = ra.runOnce(context.Background()) })
			wg.Go(func() { repB, errB = rb.runOnce(context.Background()) })
			wg.Wait()
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			leases := []string{repA.Lease, repB.Lease}
			slices.Sort(leases)
			if !slices.Equal(leases, []string{"busy", "held"}) || a.runs+b.runs != 1 {
				t.Fatalf("leases %v, %d job runs; want one run held and one busy", leases, a.runs+b.runs)
			}
			busy := ra
			if repB.Lease == "busy" {
				busy = rb
			}
			if n := testutil.ToFloat64(busy.metrics.runs.WithLabelValues("busy")); n != 1 {
				t.Fatalf("busy runs %v on the instance that stood aside, want 1", n)
			}
		})
	})
}
