package fairdraw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

const (
	entrants = 40
	window   = 5 * time.Second
	units    = 10 // the first prize's stock: fewer than the entrants, so some wait
	plenty   = 60 // the second prize's: more than the entrants, so it falls back to first come
)

// A draw prize end to end: entries before the window are refused and counted; during it
// every user enters once however often they press; after it nobody enters; the reconciler
// freezes the set, ranks it and admits exactly the stock's worth of winners in rank order,
// each once, as orders; every entrant's place checks from the public record and their own
// proof, and a tampered record does not; a cancelled winner's unit goes to the first
// waitlisted entrant; a prize with more units than entrants falls back to first come, first
// served; and the pipeline's invariants hold.
func TestDrawEndToEnd(t *testing.T) {
	bin := stacktest.Binaries(t)
	ctx := stacktest.Context(t, 4*time.Minute)
	c, err := harness.NewPipeline(ctx, harness.Options{Bin: bin, Stocks: []int{units, plenty}, Limit: 1, Consumers: 1,
		OpensIn: 15 * time.Second, Draws: []time.Duration{window, window}, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sid := c.Session.ID
	scarce, ample := c.Prizes[0].ID, c.Prizes[1].ID
	u := newUsers(t, c, entrants)
	base := "http://" + c.GatewayAddr

	// Before the window: refused, and counted per user (the first five press twice). The
	// open is far enough out for the services to start on a loaded machine under -race.
	waitServing(ctx, t, base, sid, scarce, u[0])
	if left := time.Until(c.Session.Start); left < 2*time.Second {
		t.Fatalf("the services took until %s before the open to serve: no room for the early presses", left)
	}
	for _, x := range u[:5] {
		for range 2 {
			if code, body := post(ctx, t, base, sid, scarce, x); code != http.StatusConflict || !strings.Contains(body, "not_open") {
				t.Fatalf("an entry before the window: %d %s, want 409 not_open", code, body)
			}
		}
	}
	if wait := time.Until(c.Session.Start); wait > 0 {
		sleep(ctx, t, wait)
	}

	// The window: everyone enters both draws; the first ten press three times each, over
	// as many connections; all answers for a user name one request id.
	rids := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, x := range u {
		presses := 1
		if i < 10 {
			presses = 3
		}
		for range presses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, p := range []int64{scarce, ample} {
					code, body := post(ctx, t, base, sid, p, x)
					var v struct {
						RequestID string `json:"request_id"`
						Status    string `json:"status"`
					}
					if err := json.Unmarshal([]byte(body), &v); code != http.StatusAccepted || err != nil || v.Status != "entered" {
						t.Errorf("entry of %s: %d %s, want 202 entered", x.id, code, body)
						return
					}
					if want := seckill.DrawRequestID(sid, p, x.id); v.RequestID != want {
						t.Errorf("entry of %s answers request id %s, want %s", x.id, v.RequestID, want)
					}
					mu.Lock()
					rids[fmt.Sprint(p, x.id)] = v.RequestID
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// After the window, a newcomer is refused.
	sleep(ctx, t, time.Until(c.Session.Start.Add(window))+200*time.Millisecond)
	late := newUsers(t, c, entrants+1)[entrants]
	if code, body := post(ctx, t, base, sid, scarce, late); code != http.StatusConflict || !strings.Contains(body, "entry_closed") {
		t.Fatalf("an entry after the window: %d %s, want 409 entry_closed", code, body)
	}

	cl := draw.Client{Base: base}
	rec := awaitDrawn(ctx, t, cl, sid, scarce, units)
	if rec.Entries != entrants || len(rec.Values) != entrants {
		t.Fatalf("record: %d entries, %d values; want %d of each", rec.Entries, len(rec.Values), entrants)
	}
	winners := awaitOrders(ctx, t, c, scarce, units)

	// Every entrant: the status poll, the proof, and the verifier agree.
	won := 0
	for _, x := range u {
		p, err := cl.Proof(ctx, sid, scarce, x.token)
		if err != nil {
			t.Fatal(err)
		}
		v, err := draw.Verify(rec, p, nil)
		if err != nil {
			t.Fatalf("the verifier refuses %s's place: %v", x.id, err)
		}
		st := poll(ctx, t, base, x, seckill.DrawRequestID(sid, scarce, x.id))
		switch v.Standing.Status {
		case draw.StatusWon:
			won++
			if !winners[x.id] {
				t.Errorf("%s won place %d by the record but has no order", x.id, v.Standing.Place)
			}
			if st.Status != "won" && st.Status != "succeeded" {
				t.Errorf("%s won place %d; its poll says %q", x.id, v.Standing.Place, st.Status)
			}
		case draw.StatusWaitlisted:
			if winners[x.id] {
				t.Errorf("%s is waitlisted by the record but has an order", x.id)
			}
			if st.Status != "waitlisted" || st.WaitlistPosition != v.Standing.WaitlistPosition || st.Place != v.Standing.Place {
				t.Errorf("%s: poll %+v, the record says place %d, waitlist position %d", x.id, st, v.Standing.Place, v.Standing.WaitlistPosition)
			}
		default:
			t.Errorf("%s: standing %+v", x.id, v.Standing)
		}
	}
	if won != units {
		t.Errorf("%d entrants verify as winners, want %d", won, units)
	}

	// A tampered record is caught: another seed, or an entry dropped from the set.
	p0, err := cl.Proof(ctx, sid, scarce, u[0].token)
	if err != nil {
		t.Fatal(err)
	}
	bad := rec
	bad.Seed = strings.Repeat("0", 64)
	if _, err := draw.Verify(bad, p0, nil); !errors.Is(err, draw.ErrCommitment) {
		t.Errorf("a changed seed: %v, want ErrCommitment", err)
	}
	bad = rec
	bad.Entries, bad.Values = rec.Entries-1, append([]string(nil), rec.Values[1:]...)
	if _, err := draw.Verify(bad, p0, nil); !errors.Is(err, draw.ErrInclusion) && !errors.Is(err, draw.ErrPlace) {
		t.Errorf("a dropped entry: %v, want ErrInclusion or ErrPlace", err)
	}

	// The early entries were counted.
	var early int64
	if err := c.DB.WithContext(ctx).Raw("SELECT COALESCE(SUM(early), 0) FROM draw_entries WHERE session_id = ? AND prize_id = ?",
		sid, scarce).Scan(&early).Error; err != nil {
		t.Fatal(err)
	}
	if early != 10 {
		t.Errorf("early entries counted: %d, want 10 (five users, twice each)", early)
	}

	// A cancelled winner's unit goes to the first waitlisted entrant.
	first := rankedAt(ctx, t, c, sid, scarce, units+1)
	var cancelled string
	for user := range winners {
		cancelled = user
		break
	}
	if err := c.Feedback(ctx, seckill.Feedback{RequestID: seckill.DrawRequestID(sid, scarce, cancelled), Kind: seckill.FeedbackCancelled,
		Reason: seckill.ReasonPaymentFailed, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	awaitOrder(ctx, t, c, seckill.DrawRequestID(sid, scarce, first))
	// The offer is recorded after the winner's event is written: its order may come first.
	if rec = awaitDrawn(ctx, t, cl, sid, scarce, units+1); rec.Cutoff != units+1 {
		t.Errorf("after one return the cutoff is %d, want %d", rec.Cutoff, units+1)
	}

	// More units than entrants: all win, and what is left goes first come, first served.
	awaitDrawn(ctx, t, cl, sid, ample, entrants)
	awaitOrders(ctx, t, c, ample, entrants)
	for {
		code, body := post(ctx, t, base, sid, ample, late)
		if code == http.StatusAccepted && strings.Contains(body, `"queued"`) {
			break
		}
		if code != http.StatusConflict || !strings.Contains(body, "entry_closed") {
			t.Fatalf("a grab after the draw with units left: %d %s, want 202 queued", code, body)
		}
		sleep(ctx, t, 200*time.Millisecond) // the phase moves to first come after the offers
	}

	if err := c.Drain(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	var res harness.Result
	if err := c.Verify(ctx, nil, &res); err != nil {
		t.Fatal(err)
	}
	// No history is recorded here (the linearizability column is the crowd rows'): the
	// invariant columns are checked one by one.
	if res.Oversold != 0 || res.Duplicates != 0 || res.Lost != 0 || res.Drift != 0 || len(res.Problems) > 0 {
		t.Fatalf("invariants: %+v", res)
	}
	// The scarce prize: its units, one of them sold twice (cancelled, then the waitlist's);
	// the ample one: every entrant and the first-come grab.
	if want := units + entrants + 1; res.Orders != want || res.Cancelled != 1 {
		t.Errorf("%d orders and %d cancelled, want %d and 1", res.Orders, res.Cancelled, want)
	}
}

type user struct {
	id, token string
}

func newUsers(t *testing.T, c *harness.Pipeline, n int) []user {
	t.Helper()
	out := make([]user, n)
	for i := range out {
		id := fmt.Sprintf("entrant-%02d", i)
		tok, err := c.Token(id)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = user{id: id, token: tok}
	}
	return out
}

// post sends one grab (an entry, during a draw's window) and returns the answer.
func post(ctx context.Context, t *testing.T, base string, sid, pid int64, u user) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", base, sid, pid), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	// A new connection per press, as many devices of one buyer would.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitServing waits until the gateway answers (it starts with the pipeline).
func waitServing(ctx context.Context, t *testing.T, base string, sid, pid int64, u user) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return
		}
		sleep(ctx, t, 100*time.Millisecond)
	}
}

type status struct {
	Status           string `json:"status"`
	Place            int    `json:"place"`
	WaitlistPosition int    `json:"waitlist_position"`
}

func poll(ctx context.Context, t *testing.T, base string, u user, rid string) status {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/grabs/"+rid, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var st status
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &st) != nil {
		t.Fatalf("poll %s of %s: %s %s", rid, u.id, resp.Status, b)
	}
	return st
}

// awaitDrawn waits until the draw is drawn and has offered cutoff places.
func awaitDrawn(ctx context.Context, t *testing.T, cl draw.Client, sid, pid int64, cutoff int) draw.Record {
	t.Helper()
	for {
		rec, err := cl.Record(ctx, sid, pid)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Phase == draw.PhaseDrawn && rec.Cutoff >= cutoff {
			return rec
		}
		sleep(ctx, t, 200*time.Millisecond)
	}
}

// awaitOrders waits until the prize has n succeeded orders and returns their users; each
// order is a draw's (its request id is the draw's for its user) and no user has two.
func awaitOrders(ctx context.Context, t *testing.T, c *harness.Pipeline, pid int64, n int) map[string]bool {
	t.Helper()
	for {
		var rows []struct{ RequestID, UserID string }
		if err := c.DB.WithContext(ctx).Raw("SELECT request_id, user_id FROM orders WHERE prize_id = ? AND status = 'succeeded'", pid).
			Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		if len(rows) > n {
			t.Fatalf("%d orders of prize %d, want %d", len(rows), pid, n)
		}
		if len(rows) == n {
			users := map[string]bool{}
			for _, r := range rows {
				if users[r.UserID] {
					t.Fatalf("user %s has two orders of prize %d", r.UserID, pid)
				}
				users[r.UserID] = true
				if r.RequestID != seckill.DrawRequestID(c.Session.ID, pid, r.UserID) {
					t.Fatalf("order %s of %s is not the draw's", r.RequestID, r.UserID)
				}
			}
			return users
		}
		sleep(ctx, t, 200*time.Millisecond)
	}
}

func awaitOrder(ctx context.Context, t *testing.T, c *harness.Pipeline, rid string) {
	t.Helper()
	for {
		var n int64
		if err := c.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE request_id = ? AND status = 'succeeded'", rid).
			Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		sleep(ctx, t, 200*time.Millisecond)
	}
}

// rankedAt is the user at place of a ranked draw.
func rankedAt(ctx context.Context, t *testing.T, c *harness.Pipeline, sid, pid int64, place int) string {
	t.Helper()
	var u string
	if err := c.DB.WithContext(ctx).Raw("SELECT user_id FROM draw_entries WHERE session_id = ? AND prize_id = ? AND place = ?",
		sid, pid, place).Scan(&u).Error; err != nil || u == "" {
		t.Fatalf("place %d: %q %v", place, u, err)
	}
	return u
}

func sleep(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatalf("waiting: %v", ctx.Err())
	case <-time.After(d):
	}
}

// testLog writes the pipeline's process output to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
