package grab

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// heldOf is how many grabs of session×prize u holds unpublished, as the report reads it.
func heldOf(u *unpublished, sessionID, prizeID int64) int {
	for _, c := range u.counts() {
		if c.SessionID == sessionID && c.PrizeID == prizeID {
			return c.Pending
		}
	}
	return 0
}

// verdictGate answers every Reserve with one verdict (or error) and records what the
// gateway held unpublished while the script "ran".
type verdictGate struct {
	held    *unpublished
	verdict stock.Verdict
	err     error
	during  int
}

func (g *verdictGate) Reserve(_ context.Context, gr seckill.Grab) (stock.Verdict, error) {
	g.during = heldOf(g.held, gr.SessionID, gr.PrizeID)
	return g.verdict, g.err
}

func (g *verdictGate) Lookup(context.Context, string) (stock.Lookup, error) {
	return stock.Lookup{}, nil
}

type alwaysOpen struct{}

func (alwaysOpen) Check(int64, int64, time.Time) error { return nil }
func (alwaysOpen) Buckets(int64, int64) int            { return 1 }
func (alwaysOpen) Draw(int64, int64) (time.Time, bool) { return time.Time{}, false }

// recordingWriter is a Kafka writer that fails or succeeds and records, for each write, what
// the gateway held unpublished while it was writing.
type recordingWriter struct {
	held   *unpublished
	fail   bool
	mu     sync.Mutex
	during []int
}

func (w *recordingWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range msgs {
		w.during = append(w.during, heldOf(w.held, 7, 9))
	}
	if w.fail {
		return errors.New("kafka unavailable")
	}
	return nil
}

// The rebuild guard counts a grab from before the admission script can admit it until its
// event is acknowledged: held while Reserve runs whatever the verdict, still held while its
// event is written, released at once by a verdict that publishes nothing, and kept (by the
// relay) when the produce failed.
func TestGrabIsHeldFromBeforeReserve(t *testing.T) {
	for _, tc := range []struct {
		name         string
		verdict      stock.Verdict
		err          error
		produceFails bool
		code         int
		writes       int // events the handler produced
		heldAfter    int // still held when the handler answered
	}{
		{name: "admitted", verdict: stock.Verdict{Code: stock.Admitted}, code: 202, writes: 1},
		{name: "admitted, produce failed: relayed", verdict: stock.Verdict{Code: stock.Admitted}, produceFails: true, code: 202, writes: 1, heldAfter: 1},
		{name: "repeat still queued", verdict: stock.Verdict{Code: stock.Seen, State: stock.Status{State: "queued"}}, code: 202, writes: 1},
		{name: "repeat settled", verdict: stock.Verdict{Code: stock.Seen, State: stock.Status{State: "succeeded", OrderID: 3}}, code: 202},
		{name: "limit", verdict: stock.Verdict{Code: stock.Limit}, code: 409},
		{name: "sold out", verdict: stock.Verdict{Code: stock.SoldOut}, code: 409},
		{name: "not loaded", verdict: stock.Verdict{Code: stock.NotLoaded}, code: 503},
		{name: "foreign key", verdict: stock.Verdict{Code: stock.Foreign}, code: 409},
		{name: "outcome unknown", err: errors.New("i/o timeout"), code: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := newUnpublished()
			held.inDoubt = 0 // count the admission call from its start, to see that it is tracked
			gate := &verdictGate{held: held, verdict: tc.verdict, err: tc.err}
			w := &recordingWriter{held: held, fail: tc.produceFails}
			m := testMetrics()
			log := slog.New(slog.DiscardHandler)
			// The user header counts only from a trusted proxy: httptest's requests come from 192.0.2.1.
			a := &API{gate: gate, userHeader: "X-User", userProxies: clientip.New([]netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}),
				schedule: alwaysOpen{}, soldOut: newSoldOutFlags(time.Minute),
				events: w, relay: newRelay(w, 10, held, m, log), held: held, produceTTL: time.Second,
				admitTimeout: time.Second, metrics: m, log: log, now: time.Now, admission: admission.New(admission.Config{Max: 10})}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/sessions/7/prizes/9/grab", nil)
			req.SetPathValue("session", "7")
			req.SetPathValue("prize", "9")
			req.Header.Set("X-User", "alice")
			req.Header.Set("Idempotency-Key", "held-key-0001")
			rec := httptest.NewRecorder()
			a.grab(rec, req)

			if rec.Code != tc.code {
				t.Fatalf("answered %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			if gate.during != 1 {
				t.Fatalf("held %d grabs while Reserve ran, want 1: a grab the script admits must be counted before its reply arrives", gate.during)
			}
			if len(w.during) != tc.writes {
				t.Fatalf("%d events written, want %d", len(w.during), tc.writes)
			}
			for _, n := range w.during {
				if n != 1 {
					t.Fatalf("held %d while its event was written, want 1", n)
				}
			}
			if n := heldOf(held, 7, 9); n != tc.heldAfter {
				t.Fatalf("held %d after the answer, want %d", n, tc.heldAfter)
			}
			if tc.heldAfter > 0 {
				if k := event.PartitionKey(7, 9); len(a.relay.queue) != 1 || string((<-a.relay.queue).Key) != string(k) {
					t.Fatal("the grab still held is not the one queued in the relay")
				}
			}
		})
	}
}

// The relay's shutdown drain releases a grab only after its write returned, published or
// given up: released before, the guard would read the gateway as holding nothing while the
// event is still on its way to Kafka.
func TestRelayDrainReleasesAfterTheWrite(t *testing.T) {
	for _, fail := range []bool{false, true} {
		held := newUnpublished()
		w := &recordingWriter{held: held, fail: fail}
		r := newRelay(w, 10, held, testMetrics(), slog.New(slog.DiscardHandler))
		for range 2 {
			held.hold(event.PartitionKey(7, 9)) // as publish holds before handing it over
			if !r.Enqueue(kafka.Message{Key: event.PartitionKey(7, 9)}) {
				t.Fatal("enqueue refused")
			}
		}
		r.drain(time.Second, nil)
		if len(w.during) != 2 || w.during[0] != 2 || w.during[1] != 1 {
			t.Fatalf("write fails %v: held while each event was written %v, want [2 1]", fail, w.during)
		}
		if n := heldOf(held, 7, 9); n != 0 {
			t.Fatalf("write fails %v: %d still held after the drain, want 0", fail, n)
		}
	}
}

// An admission call in flight counts as a held grab only once it is store.AdmissionInDoubt
// old (the reconciler trusts only reports stamped that long after it saw the keys missing):
// a crowd retrying its 503s while the keys are lost, each call a round trip long, must not
// keep the prize from ever looking quiet; a call stuck that long may hold an admitted grab.
func TestAdmissionCallsCountOnceInDoubt(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	held := newUnpublished()
	held.now = func() time.Time { return now }
	key := event.PartitionKey(7, 9)
	var crowd []uint64
	for range 100 {
		crowd = append(crowd, held.admit(key))
	}
	now = now.Add(store.AdmissionInDoubt - time.Millisecond)
	if n := heldOf(held, 7, 9); n != 0 {
		t.Fatalf("%d counted for admission calls younger than %s, want 0", n, store.AdmissionInDoubt)
	}
	for _, tk := range crowd[1:] {
		held.admitted(tk, false) // not loaded
	}
	now = now.Add(time.Millisecond)
	if n := heldOf(held, 7, 9); n != 1 {
		t.Fatalf("%d counted for one admission call in flight for %s, want 1", n, store.AdmissionInDoubt)
	}
	held.admitted(crowd[0], true) // admitted: held until published
	if n := heldOf(held, 7, 9); n != 1 {
		t.Fatalf("%d counted for an admitted grab not yet published, want 1", n)
	}
	held.release(key)
	if n := heldOf(held, 7, 9); n != 0 || len(held.admitting) != 0 {
		t.Fatalf("%d counted, %d calls tracked after everything ended, want 0 and 0", n, len(held.admitting))
	}
}

// The grabs of a prize's stock buckets (keyed session:prize:b, docs/design.md) are reported
// under their prize, added to bucket 0's: the reconciler's rebuild guard asks per prize
// (store.Unpublished.Quiet), and a bucket's grab left out of the report would let a lost
// bucket be rebuilt while the only record of an admitted grab is in this gateway's relay.
func TestUnpublishedCountsBucketsUnderTheirPrize(t *testing.T) {
	held := newUnpublished()
	held.now = func() time.Time { return time.Unix(1_000_000, 0) }
	held.hold(event.PartitionKey(7, 9))
	held.hold(event.BucketPartitionKey(7, 9, 2))
	held.hold(event.BucketPartitionKey(7, 9, 3))
	tk := held.admit(event.BucketPartitionKey(7, 9, 1))
	held.now = func() time.Time { return time.Unix(1_000_000, 0).Add(store.AdmissionInDoubt) }
	held.hold(event.BucketPartitionKey(7, 10, 1)) // another prize, bucket 0 never held
	if n := heldOf(held, 7, 9); n != 4 {
		t.Fatalf("prize 9: %d counted, want 4 (bucket 0, buckets 2 and 3, and bucket 1's call in doubt)", n)
	}
	if n := heldOf(held, 7, 10); n != 1 {
		t.Fatalf("prize 10: %d counted, want its bucket 1's grab", n)
	}
	if got := len(held.counts()); got != 2 {
		t.Fatalf("%d report rows, want one per prize: %+v", got, held.counts())
	}
	held.admitted(tk, false)
	held.release(event.BucketPartitionKey(7, 9, 2))
	held.release(event.BucketPartitionKey(7, 9, 3))
	if n := heldOf(held, 7, 9); n != 1 {
		t.Fatalf("prize 9 after the buckets' releases: %d counted, want bucket 0's 1", n)
	}
}
