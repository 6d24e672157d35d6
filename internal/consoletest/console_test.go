package consoletest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// operator is the name of the credential the tests sign in with; it must come back as the
// actor in MySQL.
const operator = "alice"

// TestConsole walks the console as an operator would, on one pipeline and one browser tab:
// each step needs the sign-in of the first, and starting the processes once keeps the test
// affordable on a small machine.
func TestConsole(t *testing.T) {
	chromiumPath(t) // skip or fail before starting any process
	p := startPipeline(t)
	b := newBrowser(t, p.admin, 1280, 900)
	// Its first session opens 15 s from now: time to sign in and press Preheat before it does.
	sale := p.createActivity("console sale", time.Now().Add(15*time.Second).Truncate(time.Second), map[string]int{"phone": 50, "case": 10})

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"sign in", func(t *testing.T) { signIn(t, b, p) }},
		{"live figures match the admin API", func(t *testing.T) { liveFigures(t, b, p, sale) }},
		{"adjust and close the next session", func(t *testing.T) { adjustAndClose(t, b, p, sale) }},
		{"the live view shows open and next sessions", func(t *testing.T) { liveShowsOpenAndNext(t, b, p) }},
		{"create an activity", func(t *testing.T) { createActivity(t, b, p) }},
		{"a draw prize through the form and its Draw card", func(t *testing.T) { drawPrize(t, b, p) }},
		{"replay a dead letter after the fix", func(t *testing.T) { replayDeadLetter(t, b, p, sale) }},
		{"resolve a drift case", func(t *testing.T) { resolveDrift(t, b, p, sale) }},
		{"reconciler reports", func(t *testing.T) { reports(t, b, p) }},
		// Last: its transfer stays unfinished, which a reconciler pass would resume.
		{"a bucketed prize's page", func(t *testing.T) { bucketedPrize(t, b, p, sale) }},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			b.saveOnFailure(t)
			s.run(t)
		})
		if !ok {
			t.Fatalf("step %q failed; the later steps build on it", s.name)
		}
	}
}

// signIn: a wrong token is refused with the API's words, the right one lands on Live, and the
// session cookie is out of the page's reach and useless without the guard header.
func signIn(t *testing.T, b *browser, p *pipeline) {
	b.open(t, "#/live")
	b.waitPresent(t, "#sign-in:not([hidden])", 10*time.Second)
	b.typeKeys(t, "#sign-in-token", "not-the-token"+kb.Enter)
	b.waitText(t, tid("sign-in-error"), "401 unauthorized: wrong admin token", 10*time.Second)

	b.setValue(t, "#sign-in-token", p.operatorToken)
	b.typeKeys(t, "#sign-in-token", kb.Enter)
	b.waitText(t, tid("signed-in-as"), "signed in as "+operator, 10*time.Second)
	b.waitText(t, tid("live-updated"), "updated", 10*time.Second)
	if msg := b.text(t, tid("live-error")); msg != "" {
		t.Fatalf("live view error: %s", msg)
	}

	if cookies := eval[string](t, b, "document.cookie"); strings.Contains(cookies, "seckill_console") {
		t.Fatalf("the session cookie is readable by scripts: %q", cookies)
	}
	// The same cookie without the X-Seckill-Console header (what a cross-site form or
	// image would send) is refused.
	status := eval[int](t, b, `fetch('/admin/v1/activities', {credentials: 'same-origin'}).then(r => r.status)`)
	if status != http.StatusUnauthorized {
		t.Fatalf("admin API with the cookie but no guard header: %d, want 401", status)
	}
}

// dbStock is a stock row's figures as the admin API answers them.
type dbStock struct {
	Total int64 `json:"total"`
	Left  int64 `json:"left"`
}

// figures are one prize's numbers, as the page or the API shows them.
type figures struct{ MySQLLeft, RedisLeft, Sold, Pending int64 }

type overview struct {
	Sessions []struct {
		SessionID int64  `json:"session_id"`
		State     string `json:"state"`
		Prizes    []struct {
			PrizeID   int64 `json:"prize_id"`
			Total     int64 `json:"total"`
			MySQLLeft int64 `json:"mysql_left"`
			Sold      int64 `json:"sold"`
			Redis     struct {
				Loaded  bool  `json:"loaded"`
				Left    int64 `json:"left"`
				Pending int64 `json:"pending"`
			} `json:"redis"`
		} `json:"prizes"`
	} `json:"sessions"`
}

// apiFigures reads one prize's figures from the overview and from the session view.
func apiFigures(p *pipeline, session, prize int64) (fromOverview, fromSession figures, state string) {
	var ov overview
	p.mustAdmin("GET", "/admin/v1/overview", nil, &ov, http.StatusOK)
	for _, s := range ov.Sessions {
		for _, pr := range s.Prizes {
			if s.SessionID == session && pr.PrizeID == prize {
				state = s.State
				fromOverview = figures{pr.MySQLLeft, pr.Redis.Left, pr.Sold, pr.Redis.Pending}
			}
		}
	}
	var sv struct {
		Stock []struct {
			PrizeID int64   `json:"prize_id"`
			DB      dbStock `json:"db"`
			Redis   struct {
				Left    int64 `json:"left"`
				Pending int64 `json:"pending"`
			} `json:"redis"`
		} `json:"stock"`
	}
	p.mustAdmin("GET", fmt.Sprintf("/admin/v1/sessions/%d", session), nil, &sv, http.StatusOK)
	for _, st := range sv.Stock {
		if st.PrizeID == prize {
			fromSession = figures{st.DB.Left, st.Redis.Left, st.DB.Total - st.DB.Left, st.Redis.Pending}
		}
	}
	return fromOverview, fromSession, state
}

// pageFigures reads one prize's figures off the Live view (-1 where it shows no number).
func pageFigures(t *testing.T, b *browser, session, prize int64) figures {
	num := func(field string) int64 {
		s := strings.ReplaceAll(b.text(t, tid(fmt.Sprintf("prize-%d-%d-%s", session, prize, field))), ",", "")
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return figures{num("mysql-left"), num("redis-left"), num("sold"), num("pending")}
}

// liveFigures: the sale's session is upcoming; Preheat on the page loads it; once it opens,
// three grabs go through the public API, and the page's figures settle on what the API says.
func liveFigures(t *testing.T, b *browser, p *pipeline, sale activity) {
	b.goTo(t, "#/live")
	phone := sale.Prizes["phone"]
	b.waitText(t, tid(fmt.Sprintf("session-%d", sale.Session)), "upcoming", 10*time.Second)
	b.click(t, "#preheat-"+strconv.FormatInt(sale.Session, 10))
	b.waitText(t, tid("live-notice"), fmt.Sprintf("Session %d preheated: 2 loaded", sale.Session), 10*time.Second)
	b.waitText(t, tid(fmt.Sprintf("prize-%d-%d-redis-left", sale.Session, phone)), "50", 10*time.Second)

	b.waitText(t, tid(fmt.Sprintf("session-%d", sale.Session)), "open", 30*time.Second)
	for _, u := range []string{"u1", "u2", "u3"} {
		p.mustGrab(u, sale.Session, phone)
	}
	want := figures{MySQLLeft: 47, RedisLeft: 47, Sold: 3, Pending: 0}
	var page, ov, sv figures
	waitUntil(t, 30*time.Second, func() string {
		return fmt.Sprintf("figures settle on %+v: page %+v, overview %+v, session %+v", want, page, ov, sv)
	}, func() bool {
		ov, sv, _ = apiFigures(p, sale.Session, phone)
		page = pageFigures(t, b, sale.Session, phone)
		return page == want && ov == want && sv == want
	})
	// Three admissions in the last few seconds: the rate is a number, not the first
	// refresh's dash (its value depends on when the refreshes fell).
	rate := b.text(t, tid(fmt.Sprintf("prize-%d-%d-rate", sale.Session, phone)))
	if _, err := strconv.ParseFloat(rate, 64); err != nil {
		t.Fatalf("admissions/s shows %q, want a number after several refreshes", rate)
	}
}

// adjustAndClose: on the upcoming second session, Adjust stock without a reason shows the
// API's field message and with one changes the total; Close asks first, and Cancel closes
// nothing.
func adjustAndClose(t *testing.T, b *browser, p *pipeline, sale activity) {
	phone := sale.Prizes["phone"]
	form := fmt.Sprintf("#adjust-%d-%d", sale.Next, phone)
	b.waitPresent(t, form, 10*time.Second)
	b.click(t, fmt.Sprintf("[data-testid=%q] summary", fmt.Sprintf("prize-%d-%d", sale.Next, phone)))
	b.setValue(t, form+"-total", "60")
	b.click(t, form+" button[type=submit]")
	b.waitText(t, form+" [data-field-error=reason]", "must be 1 to 512 characters", 10*time.Second)

	b.typeKeys(t, form+"-reason", "supplier sent ten more"+kb.Enter)
	b.waitText(t, tid(fmt.Sprintf("adjust-%d-%d-notice", sale.Next, phone)), "Total 50 → 60", 10*time.Second)
	_, sv, _ := apiFigures(p, sale.Next, phone)
	if sv.MySQLLeft != 60 {
		t.Fatalf("after the adjustment MySQL has %d left on session %d, want 60", sv.MySQLLeft, sale.Next)
	}
	b.waitText(t, tid(fmt.Sprintf("prize-%d-%d-total", sale.Next, phone)), "60", 10*time.Second)

	closed := func() bool {
		var s struct {
			ClosedAt *time.Time `json:"closed_at"`
		}
		p.mustAdmin("GET", fmt.Sprintf("/admin/v1/sessions/%d", sale.Next), nil, &s, http.StatusOK)
		return s.ClosedAt != nil
	}
	b.click(t, fmt.Sprintf("#close-%d", sale.Next))
	b.waitPresent(t, "#confirm[open]", 5*time.Second)
	b.click(t, "#confirm-cancel")
	b.waitJS(t, "the confirmation to close", "!document.getElementById('confirm').open", 5*time.Second)
	if closed() {
		t.Fatal("Cancel in the confirmation closed the session")
	}
	b.click(t, fmt.Sprintf("#close-%d", sale.Next))
	b.waitPresent(t, "#confirm[open]", 5*time.Second)
	b.click(t, "#confirm-ok")
	b.waitJS(t, "the confirmation to close", "!document.getElementById('confirm').open", 5*time.Second)
	if rv := eval[string](t, b, "document.getElementById('confirm').returnValue"); rv != "ok" {
		t.Fatalf("the confirmation closed with %q, want ok", rv)
	}
	b.waitText(t, tid("live-notice"), fmt.Sprintf("Session %d closed.", sale.Next), 10*time.Second)
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("session %d closed after Confirm", sale.Next) }, closed)
}

// liveShowsOpenAndNext: an activity every minute for two hours (120 sessions ahead) adds
// one card to the live view, its next session; the rest of the day's sessions are a count
// and a one-line list that "Show more" extends twenty at a time. (Before, every upcoming
// session of every activity was a card: a page 6,700 px tall with a few such activities.)
func liveShowsOpenAndNext(t *testing.T, b *browser, p *pipeline) {
	start := time.Now().UTC().Add(10 * time.Minute).Truncate(time.Minute)
	var act struct {
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	p.mustAdmin("POST", "/admin/v1/activities", map[string]any{
		"name": "every minute", "window_start": start.Format(time.RFC3339), "window_end": start.Add(2 * time.Hour).Format(time.RFC3339),
		"interval": "1m", "session_length": "30s", "prizes": []map[string]any{{"name": "pin", "stock": 3}},
	}, &act, http.StatusCreated)
	if len(act.Sessions) != 120 {
		t.Fatalf("%d sessions, want 120", len(act.Sessions))
	}
	b.goTo(t, "#/live")
	b.waitPresent(t, tid(fmt.Sprintf("session-%d", act.Sessions[0].ID)), 10*time.Second)
	var ov struct {
		Sessions []struct {
			SessionID int64  `json:"session_id"`
			State     string `json:"state"`
		} `json:"sessions"`
		Others struct {
			Total int `json:"total"`
		} `json:"others"`
	}
	p.mustAdmin("GET", "/admin/v1/overview", nil, &ov, http.StatusOK)
	var want []string
	for _, s := range ov.Sessions {
		want = append(want, fmt.Sprintf("session-%d", s.SessionID))
	}
	cards := `[...document.querySelectorAll('[data-testid="live-sessions"] > section')].map((e) => e.dataset.testid).join(' ')`
	b.waitJS(t, "the cards of the overview's sessions", cards+` === `+strconv.Quote(strings.Join(want, " ")), 10*time.Second)
	if len(ov.Sessions) > 3 || ov.Others.Total < 119 {
		t.Fatalf("the overview shows %d sessions with %d others, want the open one and each activity's next: %+v",
			len(ov.Sessions), ov.Others.Total, ov.Sessions)
	}
	if n := eval[int](t, b, `document.querySelectorAll('[data-testid="`+fmt.Sprintf("session-%d", act.Sessions[1].ID)+`"]').length`); n != 0 {
		t.Fatalf("the recurring activity's second session has a card")
	}
	if h := eval[int](t, b, "document.documentElement.scrollHeight"); h > 3000 {
		t.Fatalf("the live view is %d px tall", h)
	}
	b.waitText(t, tid("others-title"), fmt.Sprintf("Other sessions today (%d)", ov.Others.Total), 10*time.Second)
	rows := `document.querySelectorAll('[data-testid="others-list"] tbody tr').length`
	if n := eval[int](t, b, rows); n != 0 {
		t.Fatalf("%d other sessions listed before Show more", n)
	}
	b.click(t, tid("others-more"))
	b.waitJS(t, "20 other sessions listed", rows+" === 20", 10*time.Second)
	b.click(t, tid("others-more"))
	b.waitJS(t, "40 other sessions listed", rows+" === 40", 10*time.Second)
	b.waitPresent(t, tid(fmt.Sprintf("other-%d", act.Sessions[1].ID)), 5*time.Second)
}

// createActivity: an invalid submit shows the API's field message next to the field; a
// valid one lands on the new activity with its sessions.
func createActivity(t *testing.T, b *browser, p *pipeline) {
	b.goTo(t, "#/activities")
	b.waitPresent(t, "#activity-form", 10*time.Second)
	b.setValue(t, "#act-name", "")
	b.click(t, "#create-activity")
	b.waitText(t, tid("field-error-name"), "must be 1 to 128 characters", 10*time.Second)
	b.waitText(t, tid("activity-form-error"), "400 invalid_input", 5*time.Second)

	name := "console-made-" + stacktest.ID(t)
	b.setValue(t, "#act-name", name)
	b.setValue(t, "#act-prize-name-0", "mug")
	b.setValue(t, "#act-prize-stock-0", "7")
	b.click(t, "#create-activity")
	b.waitText(t, tid("activity-name"), name, 10*time.Second)

	hash := eval[string](t, b, "location.hash")
	id := strings.TrimPrefix(hash, "#/activities/")
	var act struct {
		Name     string `json:"name"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	p.mustAdmin("GET", "/admin/v1/activities/"+id, nil, &act, http.StatusOK)
	if act.Name != name || len(act.Sessions) == 0 {
		t.Fatalf("activity %s from the API: %+v", id, act)
	}
	for _, s := range act.Sessions {
		b.waitText(t, tid(fmt.Sprintf("session-row-%d", s.ID)), "mug: 7 / 7", 5*time.Second)
	}
	rows := eval[int](t, b, `document.querySelectorAll('[data-testid="sessions-table"] tbody tr').length`)
	if rows != len(act.Sessions) {
		t.Fatalf("the page lists %d sessions, the API %d", rows, len(act.Sessions))
	}
}

// replayDeadLetter: a grab whose stock row is gone is dead-lettered by the consumer and
// becomes a case; Replay is refused with the reason until the row is back, then the grab
// becomes an order.
func replayDeadLetter(t *testing.T, b *browser, p *pipeline, sale activity) {
	prize := sale.Prizes["case"]
	requestID, restore := p.poisonedGrab("poisoned", sale.Session, prize)
	caseID := p.waitCase(t, seckill.CaseDeadLetter, requestID)

	b.goTo(t, "#/exceptions?state=open&kind=dead_letter")
	b.waitText(t, tid(fmt.Sprintf("case-%d", caseID)), "dead_letter", 10*time.Second)
	b.click(t, tid(fmt.Sprintf("case-link-%d", caseID)))
	b.waitPresent(t, tid("case-detail"), 10*time.Second)
	b.waitPresent(t, tid("case-evidence"), 5*time.Second)

	b.setValue(t, "#replay-note", "before the fix")
	b.click(t, "#replay")
	b.waitText(t, tid("case-action-error"), "409 not_replayable", 10*time.Second)
	if b.text(t, tid("case-state")) != "open" {
		t.Fatalf("a refused replay changed the case's state to %q", b.text(t, tid("case-state")))
	}

	restore()
	b.setValue(t, "#replay-note", "stock row restored")
	b.click(t, "#replay")
	b.waitText(t, tid("case-state"), "replayed", 10*time.Second)
	b.waitText(t, tid("case-actions"), "stock row restored", 5*time.Second)
	waitUntil(t, 30*time.Second, func() string { return "the replayed grab " + requestID + " becomes an order" }, func() bool {
		var n int64
		p.db.Table("orders").Where("request_id = ? AND status = ?", requestID, "succeeded").Count(&n)
		return n == 1
	})
}

// resolveDrift: a case the reconciler would record is resolved on the page with a note;
// MySQL has the state, the note, the signed-in name and the action.
func resolveDrift(t *testing.T, b *browser, p *pipeline, sale activity) {
	prize := sale.Prizes["phone"]
	key := fmt.Sprintf("%d:%d", sale.Session, prize)
	err := store.NewExceptions(p.db).Record(stacktest.Context(t, 10*time.Second), time.Now(), store.CaseReport{
		Kind: seckill.CaseDriftUncorrected, Key: key, SessionID: sale.Session, PrizeID: prize,
		Detail:   "Redis left 44 while MySQL says 47 for 3 runs",
		Evidence: map[string]any{"redis_left": 44, "mysql_left": 47, "runs": 3, "history": []int{44, 44, 44}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var caseID int64
	if err := p.db.Table("exception_cases").Where("kind = ? AND case_key = ?", seckill.CaseDriftUncorrected, key).Pluck("id", &caseID).Error; err != nil || caseID == 0 {
		t.Fatalf("recorded drift case not found: %v", err)
	}

	b.goTo(t, fmt.Sprintf("#/exceptions/%d", caseID))
	b.waitText(t, tid("case-title"), "drift_uncorrected", 10*time.Second)
	b.waitText(t, tid("case-evidence"), "redis_left44", 5*time.Second)
	if b.text(t, "#replay") != "" {
		t.Fatal("a drift case offers Replay; it carries no event to replay")
	}
	note := "checked the hot key by hand; Redis reloaded"
	b.setValue(t, "#close-note", note)
	b.click(t, "#resolve")
	b.waitText(t, tid("case-state"), "resolved", 10*time.Second)
	b.waitText(t, tid("case-note"), note, 5*time.Second)

	var row struct {
		State, StateNote, StateChangedBy string
	}
	p.db.Table("exception_cases").Select("state, state_note, state_changed_by").Where("id = ?", caseID).Take(&row)
	if row.State != seckill.CaseResolved || row.StateNote != note || row.StateChangedBy != operator {
		t.Fatalf("exception_cases row %d: %+v, want resolved by %s with the note", caseID, row, operator)
	}
	var actions int64
	p.db.Table("exception_actions").Where("case_id = ? AND action = ? AND actor = ? AND note = ?", caseID, "resolve", operator, note).Count(&actions)
	if actions != 1 {
		t.Fatalf("%d exception_actions rows for the resolution, want 1", actions)
	}
}

// reports: a reconciler pass appears on the Reports view with its jobs.
func reports(t *testing.T, b *browser, p *pipeline) {
	p.reconcileOnce()
	var out struct {
		Reports []struct {
			ID   int64 `json:"id"`
			Jobs []struct {
				Name string `json:"name"`
			} `json:"jobs"`
		} `json:"reports"`
	}
	p.mustAdmin("GET", "/admin/v1/reconciler/reports?limit=20", nil, &out, http.StatusOK)
	if len(out.Reports) == 0 || len(out.Reports[0].Jobs) == 0 {
		t.Fatalf("no report with jobs after a reconciler pass: %+v", out)
	}
	b.goTo(t, "#/reports")
	first := out.Reports[0]
	for _, j := range first.Jobs {
		b.waitText(t, tid(fmt.Sprintf("report-%d", first.ID)), j.Name, 10*time.Second)
	}
}

// bucketedPrize: a prize with four stock buckets, preheated, a transfer from bucket 0 to 3
// taken in Redis and not moved yet, demand counted in bucket 1 and bucket 3 wanted. Its Live
// card links to its page (a prize without buckets has no such link), and the page shows the
// prize summed over its buckets and each bucket as GET /admin/v1/sessions/{id}/prizes/{prize}
// answers it, with the unfinished transfer.
func bucketedPrize(t *testing.T, b *browser, p *pipeline, sale activity) {
	ctx := stacktest.Context(t, 30*time.Second)
	start := time.Now().UTC().Add(10 * time.Minute).Truncate(time.Second)
	var act struct {
		Prizes []struct {
			ID int64 `json:"id"`
		} `json:"prizes"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	p.mustAdmin("POST", "/admin/v1/activities", map[string]any{
		"name": "bucketed sale", "window_start": start.Format(time.RFC3339), "window_end": start.Add(time.Hour).Format(time.RFC3339),
		"interval": "1h", "session_length": "30m", "per_user_limit": 1,
		"prizes": []map[string]any{{"name": "hot", "stock": 8, "buckets": 4}},
	}, &act, http.StatusCreated)
	sid, pid := act.Sessions[0].ID, act.Prizes[0].ID
	t.Cleanup(func() {
		for n := range 4 {
			k := stock.BucketKeysFor(sid, pid, n, 4)
			p.rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned, k.Transfers(), k.Demand(),
				k.Wanted(), strings.TrimSuffix(k.Meta, "meta")+"rev")
		}
	})
	p.mustAdmin("POST", fmt.Sprintf("/admin/v1/sessions/%d/preheat", sid), nil, nil, http.StatusOK)
	if err := p.rdb.IncrBy(ctx, stock.BucketKeysFor(sid, pid, 1, 4).Demand(), 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.rdb.Set(ctx, stock.BucketKeysFor(sid, pid, 3, 4).Wanted(), 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h, ok, err := lease.New(p.db, "t-console-transfer-"+stacktest.ID(t), time.Minute).TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	tr, err := store.NewCatalog(p.db, time.Now).PlanTransfer(ctx, h.Fence, sid, pid, 0, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	gate, err := stock.NewGate(ctx, p.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := gate.Take(ctx, sid, pid, 0, 4, tr.ID, 2, h.Fence.Number); err != nil || n != 2 {
		t.Fatalf("take: %d %v", n, err)
	}

	b.goTo(t, "#/live")
	link := tid(fmt.Sprintf("prize-%d-%d-buckets", sid, pid))
	b.waitText(t, link, "4 buckets", 10*time.Second)
	phone := sale.Prizes["phone"]
	b.waitPresent(t, tid(fmt.Sprintf("prize-%d-%d", sale.Session, phone)), 10*time.Second)
	if eval[bool](t, b, fmt.Sprintf(`document.querySelector('[data-testid="prize-%d-%d-buckets"]') !== null`, sale.Session, phone)) {
		t.Fatal("a prize without buckets links to a bucket table")
	}
	b.click(t, link)
	b.waitText(t, tid("bucket-3-wanted"), "wanted", 10*time.Second)

	var page struct {
		DB         dbStock `json:"db"`
		InFlight   int64   `json:"in_flight"`
		BucketRows []struct {
			Bucket int     `json:"bucket"`
			DB     dbStock `json:"db"`
			Redis  struct {
				Left   int64 `json:"left"`
				Total  int64 `json:"total"`
				Sent   int64 `json:"sent"`
				Demand int64 `json:"demand"`
			} `json:"redis"`
		} `json:"bucket_rows"`
	}
	p.mustAdmin("GET", fmt.Sprintf("/admin/v1/sessions/%d/prizes/%d", sid, pid), nil, &page, http.StatusOK)
	if page.DB.Total != 8 || page.InFlight != 2 || len(page.BucketRows) != 4 {
		t.Fatalf("prize page from the API: %+v", page)
	}
	if got := b.text(t, tid("prize-mysql")); got != "8 / 8" {
		t.Errorf("the page's MySQL %q, want 8 / 8 (the buckets' sum)", got)
	}
	if got := b.text(t, tid("prize-redis")); got != "6 / 6" {
		t.Errorf("the page's Redis %q, want 6 / 6 (2 units in flight)", got)
	}
	if got := b.text(t, tid("prize-in-flight")); got != "2" {
		t.Errorf("the page's in flight %q, want 2", got)
	}
	for _, r := range page.BucketRows {
		cell := func(field string) string { return b.text(t, tid(fmt.Sprintf("bucket-%d-%s", r.Bucket, field))) }
		if got, want := cell("mysql"), fmt.Sprintf("%d / %d", r.DB.Left, r.DB.Total); got != want {
			t.Errorf("bucket %d MySQL %q, want %q", r.Bucket, got, want)
		}
		if got, want := cell("redis"), fmt.Sprintf("%d / %d", r.Redis.Left, r.Redis.Total); got != want {
			t.Errorf("bucket %d Redis %q, want %q", r.Bucket, got, want)
		}
		if got, want := cell("sent"), strconv.FormatInt(r.Redis.Sent, 10); got != want {
			t.Errorf("bucket %d sent %q, want %q", r.Bucket, got, want)
		}
		if got, want := cell("demand"), strconv.FormatInt(r.Redis.Demand, 10); got != want {
			t.Errorf("bucket %d demand %q, want %q", r.Bucket, got, want)
		}
	}
	if r := page.BucketRows[0].Redis; r.Left != 0 || r.Sent != 2 || page.BucketRows[1].Redis.Demand != 5 {
		t.Errorf("the API's buckets %+v, want bucket 0 emptied by the take and bucket 1's demand 5", page.BucketRows)
	}
	b.waitText(t, tid(fmt.Sprintf("transfer-%d", tr.ID)), "planned", 5*time.Second)
}
