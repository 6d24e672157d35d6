package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// A draw in a chaos row (package draw): the sale gets one more prize, given by a draw, and
// a crowd of its own enters it during the window while the row's crowd grabs the other
// prizes and the fault strikes. After the crowd, the row waits for the draw and checks it
// (checkDraw): every entry a user was told of is in the frozen set, or that user was told
// to enter again; no entry nobody made; the winners are exactly the places the record
// offered, each one order; every entrant's place verifies from the public record and their
// own proof. The draw prize is kept out of the history (no client operation touches its
// stock: the draw does), and in every other invariant column.

// DrawRow is a row's draw.
type DrawRow struct {
	Entrants int           // users who enter
	Stock    int           // the draw prize's units: fewer than the entrants, so some wait
	Window   time.Duration // the entry window from the session's open
}

// DrawCrowd is the draw's crowd in a row: who was told "entered", who was told later that
// their entry was lost (to enter again), who entered again.
type DrawCrowd struct {
	c     *Pipeline
	row   DrawRow
	index int // the draw prize's index in the pipeline's prizes
	seed  uint64
	users []drawUser

	mu        sync.Mutex
	acked     map[string]bool // answered 202 entered at least once
	told      map[string]bool // a poll said not_found after an acknowledgement: told to enter again
	reentered map[string]bool // entered again after being told, and acknowledged
	entered   chan struct{}   // closed once every entrant pressed
	done      chan struct{}   // closed once the crowd confirmed its entries
	err       error
}

type drawUser struct{ id, token string }

func newDrawCrowd(c *Pipeline, row DrawRow, index int, seed uint64) (*DrawCrowd, error) {
	d := &DrawCrowd{c: c, row: row, index: index, seed: seed, acked: map[string]bool{}, told: map[string]bool{},
		reentered: map[string]bool{}, entered: make(chan struct{}), done: make(chan struct{})}
	for i := range row.Entrants {
		id := fmt.Sprintf("entrant-%d", i)
		tok, err := c.Token(id)
		if err != nil {
			return nil, err
		}
		d.users = append(d.users, drawUser{id: id, token: tok})
	}
	return d, nil
}

// Entered is closed once every entrant has pressed (the faults of the window wait for it).
func (d *DrawCrowd) Entered() <-chan struct{} { return d.entered }

// Prize is the draw prize's index in the pipeline's prizes.
func (d *DrawCrowd) Prize() int { return d.index }

func (d *DrawCrowd) prizeID() int64 { return d.c.Prizes[d.index].ID }

func (d *DrawCrowd) windowEnd() time.Time { return d.c.Session.Start.Add(d.row.Window) }

// presses is how many times entrant i presses: 1 to 3, seeded.
func (d *DrawCrowd) presses(i int) int {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", d.seed, i)
	return 1 + int(h.Sum64()%3)
}

// run enters every entrant (each pressing 1 to 3 times, each press a new connection),
// then, late in the window, polls every acknowledged entry and enters again where the poll
// says the entry is gone.
func (d *DrawCrowd) run(ctx context.Context) {
	defer close(d.done)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				for range d.presses(i) {
					if d.enter(ctx, d.users[i]) {
						d.mark(d.acked, d.users[i].id)
					}
				}
			}
		}()
	}
	for i := range d.users {
		work <- i
	}
	close(work)
	wg.Wait()
	close(d.entered)

	// Confirm late in the window, after the row's fault of the window is over.
	sleepCtx(ctx, time.Until(d.c.Session.Start.Add(d.row.Window*7/10)))
	for _, u := range d.users {
		if !d.has(d.acked, u.id) {
			continue
		}
		for time.Now().Before(d.windowEnd().Add(-300 * time.Millisecond)) {
			code, err := d.poll(ctx, u)
			if err != nil || code == http.StatusServiceUnavailable {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			if code == http.StatusNotFound {
				d.mark(d.told, u.id)
				if d.enter(ctx, u) {
					d.mark(d.reentered, u.id)
				}
			}
			break
		}
	}
}

// enter presses once, retrying what asks for a retry until the window's end; true when
// answered 202 entered.
func (d *DrawCrowd) enter(ctx context.Context, u drawUser) bool {
	url := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", d.c.GatewayAddr, d.c.Session.ID, d.prizeID())
	for ctx.Err() == nil && time.Now().Before(d.windowEnd()) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			d.fail(err)
			return false
		}
		req.Header.Set("Authorization", "Bearer "+u.token)
		req.Close = true
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond) // a gateway or proxy restarting: press again
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusAccepted:
			var v struct {
				RequestID string `json:"request_id"`
				Status    string `json:"status"`
			}
			if json.Unmarshal(body, &v) != nil || v.Status != "entered" || v.RequestID != seckill.DrawRequestID(d.c.Session.ID, d.prizeID(), u.id) {
				d.fail(fmt.Errorf("entry of %s answered 202 %s", u.id, body))
				return false
			}
			return true
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
			sleepCtx(ctx, 100*time.Millisecond)
		case resp.StatusCode == http.StatusConflict && strings.Contains(string(body), "entry_closed"):
			return false
		default:
			d.fail(fmt.Errorf("entry of %s: %d %s", u.id, resp.StatusCode, body))
			return false
		}
	}
	return false
}

// poll asks the status of u's entry and returns the HTTP status.
func (d *DrawCrowd) poll(ctx context.Context, u drawUser) (int, error) {
	url := fmt.Sprintf("http://%s/api/v1/grabs/%s", d.c.GatewayAddr, seckill.DrawRequestID(d.c.Session.ID, d.prizeID(), u.id))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (d *DrawCrowd) mark(m map[string]bool, user string) {
	d.mu.Lock()
	m[user] = true
	d.mu.Unlock()
}

func (d *DrawCrowd) has(m map[string]bool, user string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return m[user]
}

func (d *DrawCrowd) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
}

// awaitDrawn waits until the draw offered every unit it can: phase drawn and the cutoff at
// the stock or at the entries. It returns the record.
func (d *DrawCrowd) awaitDrawn(ctx context.Context, limit time.Duration) (draw.Record, error) {
	cl := draw.Client{Base: "http://" + d.c.GatewayAddr}
	deadline := time.Now().Add(limit)
	var last string
	for {
		rec, err := cl.Record(ctx, d.c.Session.ID, d.prizeID())
		if err == nil && rec.Phase == draw.PhaseDrawn && rec.Cutoff >= min(rec.Entries, d.row.Stock+len(rec.Skipped)) {
			return rec, nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("phase %s, %d entries, cutoff %d", rec.Phase, rec.Entries, rec.Cutoff)
		}
		if time.Now().After(deadline) {
			return draw.Record{}, fmt.Errorf("the draw was not done %s after the crowd: %s", limit, last)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// MidDraw waits until the draw has admitted some of its winners and not all (phase drawn,
// 0 < cutoff < what it will offer), reading MySQL every few milliseconds; false when the
// draw was not seen in that state before limit passed.
func (d *DrawCrowd) MidDraw(ctx context.Context, limit time.Duration) (cutoff, of int, ok bool, err error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var row struct {
			Phase   string
			Cutoff  int
			Entries int
		}
		err := d.c.DB.WithContext(ctx).Raw("SELECT phase, cutoff, entries FROM draws WHERE session_id = ? AND prize_id = ?",
			d.c.Session.ID, d.prizeID()).Scan(&row).Error
		if err != nil {
			return 0, 0, false, err
		}
		want := min(row.Entries, d.row.Stock)
		if row.Phase == "drawn" && row.Cutoff > 0 && row.Cutoff < want {
			return row.Cutoff, want, true, nil
		}
		if row.Phase == "drawn" && row.Cutoff >= want {
			return row.Cutoff, want, false, nil // over before it was seen in the middle
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, 0, false, ctx.Err()
}

// awaitMidDraw waits for the window's end, then until the draw is between its first and
// its last admission (MidDraw); an error when it was not seen so.
func (d *DrawCrowd) awaitMidDraw(ctx context.Context) (cutoff, of int, err error) {
	sleepCtx(ctx, time.Until(d.windowEnd()))
	cutoff, of, ok, err := d.MidDraw(ctx, 30*time.Second)
	if err == nil && !ok {
		err = fmt.Errorf("the draw was not seen between its first and its last admission (cutoff %d of %d)", cutoff, of)
	}
	return cutoff, of, err
}

// checkDraw checks the row's draw after the crowd (see the file's comment) and adds what
// it finds to res: entries acknowledged and lost without a word count as lost, winners
// without their one order as lost, orders beyond the winners as duplicates.
func (c *Pipeline) checkDraw(ctx context.Context, d *DrawCrowd, rec draw.Record, res *Result, log io.Writer) error {
	if d.err != nil {
		res.problem("draw crowd: %v", d.err)
	}
	sid, pid := c.Session.ID, d.prizeID()
	var rows []struct {
		UserID string
		Place  *int
		State  string
	}
	if err := c.DB.WithContext(ctx).Raw("SELECT user_id, place, state FROM draw_entries WHERE session_id = ? AND prize_id = ?", sid, pid).
		Scan(&rows).Error; err != nil {
		return fmt.Errorf("draw entries: %w", err)
	}
	frozen := map[string]bool{}
	byPlace := map[int]string{}
	for _, r := range rows {
		frozen[r.UserID] = true
		if r.Place != nil {
			byPlace[*r.Place] = r.UserID
		}
	}
	d.mu.Lock()
	acked, told, reentered := len(d.acked), len(d.told), len(d.reentered)
	var silent, phantom []string
	for u := range d.acked {
		if !frozen[u] && !d.told[u] {
			silent = append(silent, u)
		}
		if !frozen[u] && d.reentered[u] {
			silent = append(silent, u) // entered again, acknowledged, and still not counted
		}
	}
	pressed := map[string]bool{}
	for _, u := range d.users {
		pressed[u.id] = true
	}
	for u := range frozen {
		if !pressed[u] {
			phantom = append(phantom, u)
		}
	}
	d.mu.Unlock()
	sort.Strings(silent)
	if len(silent) > 0 {
		res.Lost += len(silent)
		res.problem("draw: %d acknowledged entries missing from the frozen set without the user being told: %v", len(silent), first(silent, 5))
	}
	if len(phantom) > 0 {
		res.problem("draw: %d entries in the frozen set from users who never entered: %v", len(phantom), first(phantom, 5))
	}
	if rec.Entries != len(rows) {
		res.problem("draw: the record says %d entries, MySQL holds %d", rec.Entries, len(rows))
	}

	// The winners: the places up to the cutoff but the skipped, each one order.
	skipped := map[int]bool{}
	for _, p := range rec.Skipped {
		skipped[p] = true
	}
	winners := map[string]bool{}
	for p := 1; p <= rec.Cutoff; p++ {
		if !skipped[p] {
			winners[byPlace[p]] = true
		}
	}
	var orders []struct{ RequestID, UserID string }
	if err := c.DB.WithContext(ctx).Raw("SELECT request_id, user_id FROM orders WHERE session_id = ? AND prize_id = ? AND status IN ('succeeded', 'cancelled')",
		sid, pid).Scan(&orders).Error; err != nil {
		return fmt.Errorf("draw orders: %w", err)
	}
	ordered := map[string]int{}
	for _, o := range orders {
		ordered[o.UserID]++
		if o.RequestID != seckill.DrawRequestID(sid, pid, o.UserID) {
			res.problem("draw: order %s of %s is not the draw's request id", o.RequestID, o.UserID)
		}
		if !winners[o.UserID] {
			res.Duplicates++
			res.problem("draw: %s has an order but is not among the places offered", o.UserID)
		}
	}
	for u := range winners {
		switch ordered[u] {
		case 1:
		case 0:
			res.Lost++
			res.problem("draw: winner %s has no order", u)
		default:
			res.Duplicates++
			res.problem("draw: winner %s has %d orders", u, ordered[u])
		}
	}

	// Every entrant's place, from the public record and their own proof.
	cl := draw.Client{Base: "http://" + c.GatewayAddr}
	verified := 0
	for _, u := range d.users {
		if !frozen[u.id] {
			continue
		}
		p, err := cl.Proof(ctx, sid, pid, u.token)
		if err != nil {
			res.problem("draw: proof of %s: %v", u.id, err)
			continue
		}
		v, err := draw.Verify(rec, p, nil)
		if err != nil {
			res.problem("draw: %s's place does not verify: %v", u.id, err)
			continue
		}
		if want := winners[u.id]; want != (v.Standing.Status == draw.StatusWon) {
			res.problem("draw: %s verifies as %s, the orders say winner=%v", u.id, v.Standing.Status, want)
			continue
		}
		verified++
	}
	fmt.Fprintf(log, "  draw: %d entrants acknowledged, %d told to enter again (%d did), %d frozen, %d winners of %d units, %d orders, %d places verified\n",
		acked, told, reentered, len(rows), len(winners), d.row.Stock, len(orders), verified)
	return nil
}

// drawRow is the draw of the draw rows: 400 entrants for 250 units, so a quarter or more
// wait, in a window long enough for a fault and the confirmations after it.
func drawRow() *DrawRow { return &DrawRow{Entrants: 400, Stock: 250, Window: 10 * time.Second} }

// killReconcilersMidDraw kills every reconciler (kill -9) once the draw has admitted some of
// its winners and not all, and starts a new one: the next lease holder must finish the
// draw, no winner admitted twice and none skipped. Killing them all makes sure the holder is
// among them (the lease-held gauge speaks only for the scheduled runs, not the draw loop).
func killReconcilersMidDraw(ctx context.Context, e *Env) error {
	cutoff, of, err := e.Draw.awaitMidDraw(ctx)
	if err != nil {
		return err
	}
	c := e.Pipeline
	for _, p := range c.Reconcilers {
		p.Kill()
	}
	fmt.Fprintf(e.Log, "  kill -9 every reconciler with the draw at cutoff %d of %d; the next one takes the lease when it expires\n", cutoff, of)
	p, err := c.StartReconciler(ctx)
	if err != nil {
		return err
	}
	c.Reconciler, c.Reconcilers = p, []*Proc{p}
	return nil
}

// inTheWindow runs fault once every entrant has pressed, while the window still has room
// for the fault and the confirmations after it.
func inTheWindow(fault func(ctx context.Context, e *Env) error) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		d := e.Draw
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.Entered():
		}
		left := time.Until(d.windowEnd())
		if left < d.row.Window/2 {
			return fmt.Errorf("the entrants took until %s before the window's end: no room for the fault", left.Round(time.Millisecond))
		}
		d.mu.Lock()
		acked := len(d.acked)
		d.mu.Unlock()
		fmt.Fprintf(e.Log, "  the fault, with %d entries acknowledged, %s before the window closes\n", acked, left.Round(time.Millisecond))
		return fault(ctx, e)
	}
}
