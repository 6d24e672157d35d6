package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// drawWindow is the entry window of the draw prizes checkDraw creates: short, since the test
// waits for it to close.
const drawWindow = 4 * time.Second

// drawGrabs collects the grab events of the winners the draw admits, in place of the grab
// topic's writer (they are checked against asyncapi.yaml like the gateway's).
type drawGrabs struct {
	mu   sync.Mutex
	msgs []kafka.Message
}

func (g *drawGrabs) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.msgs = append(g.msgs, msgs...)
	return nil
}

// checkDraw drives the draw's routes through every answer the real gateway gives them, on an
// activity of its own whose session opens a few seconds from now with two draw prizes (one
// committed to a beacon round, whose signature is supplied through the admin route) and a
// first-come prize. Entries go through the grab route during the window; the freeze, the
// ranking and the winners' admission are the reconciler's draw runner's, run here under a
// lease once the window closed. It returns the winners' grab events the runner wrote and the
// drawn record's answer.
func checkDraw(t *testing.T, public, admin contractListener, db *gorm.DB, rdb redis.UniversalClient, gate *stock.Gate,
	token func(string) string) (winners []kafka.Message, drawn contract.Exchange) {
	t.Helper()
	const tok, none = testAdminToken, "999999999"
	ctx := stacktest.Context(t, 60*time.Second)
	// The session opens 7 to 8 s from now (room for -race on a busy machine): time for the preheat and the checks of a draw
	// committed but not open; the schedule cache (reloaded every second) knows it by then.
	start := time.Now().UTC().Add(8 * time.Second).Truncate(time.Second)
	m := map[string]any{"name": "contract draw", "window_start": start.Format(time.RFC3339),
		"window_end": start.Add(time.Hour).Format(time.RFC3339), "interval": "1h", "session_length": "50m", "per_user_limit": 1,
		"prizes": []map[string]any{
			{"name": "ticket", "stock": 1, "admission": "draw", "entry_window": drawWindow.String()},
			{"name": "beacon ticket", "stock": 1, "admission": "draw", "entry_window": drawWindow.String()},
			{"name": "poster", "stock": 3},
		}}
	b, _ := json.Marshal(m)
	_, act := admin.do(t, contractCall{method: "POST", path: "/admin/v1/activities", token: tok, body: string(b), status: 201})
	sid := int64(act["sessions"].([]any)[0].(map[string]any)["id"].(float64))
	prizes := act["prizes"].([]any)
	pid := func(i int) int64 { return int64(prizes[i].(map[string]any)["id"].(float64)) }
	ticket, beaconTicket, poster := pid(0), pid(1), pid(2)
	if p := prizes[0].(map[string]any); p["admission"] != "draw" || p["entry_window"] != drawWindow.String() || p["buckets"] != float64(1) {
		t.Fatalf("draw prize answered %v", p)
	}

	// The beacon draw is committed before the preheat, as a preheat with
	// SECKILL_DRAW_BEACON_* would commit it (the preheat keeps a record it finds); its
	// beacon is a local stand-in for a drand network.
	beacon, err := draw.NewLocalBeacon(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const round = 4242
	ref := beacon.Ref(round)
	seed, err := draw.NewSeed(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var saltKey [32]byte
	if _, err := rand.Read(saltKey[:]); err != nil {
		t.Fatal(err)
	}
	book := store.NewDraws(db, time.Now)
	if _, err := book.Commit(ctx, store.Draw{SessionID: sid, PrizeID: beaconTicket, Seed: seed, SaltKey: saltKey,
		Commitment: seed.Commitment(), EntryWindowStart: start, EntryWindowEnd: start.Add(drawWindow),
		BeaconScheme: ref.Scheme, BeaconPublicKey: ref.PublicKey, BeaconRound: ref.Round}); err != nil {
		t.Fatal(err)
	}

	adminDraw := func(p int64) string { return fmt.Sprintf("/admin/v1/sessions/%d/prizes/%d/draw", sid, p) }
	publicDraw := func(p int64) string { return fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/draw", sid, p) }
	grab := func(p int64) string { return fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", sid, p) }
	// Before the preheat: no draw record yet.
	admin.do(t, contractCall{method: "GET", path: adminDraw(ticket), token: tok, status: 404, code: "not_found"})
	public.do(t, contractCall{method: "GET", path: publicDraw(ticket), status: 404, code: "not_found"})
	_, pre := admin.do(t, contractCall{method: "POST", path: fmt.Sprintf("/admin/v1/sessions/%d/preheat", sid), token: tok, status: 200})
	if pre["draws"] != float64(2) {
		t.Fatalf("preheat of a session with two draw prizes: %v", pre)
	}
	signed, err := beacon.Sign(round)
	if err != nil {
		t.Fatal(err)
	}
	other, err := beacon.Sign(round + 1)
	if err != nil {
		t.Fatal(err)
	}
	sigBody := func(sig string) string { return `{"signature": "` + sig + `"}` }
	alice, bob, carol := token("draw-alice"), token("draw-bob"), token("draw-carol")

	// Committed, not open yet.
	_, rec := public.do(t, contractCall{method: "GET", path: publicDraw(ticket), status: 200})
	if rec["phase"] != "committed" || rec["beacon"] != nil {
		t.Fatalf("record after the preheat: %v", rec)
	}
	if _, rec := public.do(t, contractCall{method: "GET", path: publicDraw(beaconTicket), status: 200}); rec["beacon"] == nil {
		t.Fatalf("record of the beacon draw after the preheat: %v", rec)
	}
	for _, c := range []contractCall{
		{method: "GET", path: publicDraw(poster), status: 404, code: "not_found"},
		{method: "GET", path: fmt.Sprintf("/api/v1/sessions/%d/prizes/%s/draw", sid, none), status: 404, code: "not_found"},
		{method: "GET", path: publicDraw(ticket) + "/proof", token: alice, status: 409, code: "not_frozen"},
		{method: "GET", path: publicDraw(ticket) + "/proof", status: 401, code: "unauthorized", docRefuses: true},
		{method: "GET", path: publicDraw(ticket) + "/proof", token: "forged.token.value", status: 401, code: "unauthorized"},
		// Before the session opens an entry is refused (and counted).
		{method: "POST", path: grab(ticket), token: alice, status: 409, code: "not_open"},

		{method: "GET", path: adminDraw(ticket), token: tok, status: 200},
		{method: "GET", path: adminDraw(poster), token: tok, status: 404, code: "not_found"},
		{method: "GET", path: fmt.Sprintf("/admin/v1/sessions/%d/prizes/abc/draw", sid), token: tok, status: 400, code: "invalid_input",
			docRefuses: true},
		{method: "GET", path: "/admin/v1/sessions/abc/prizes/1/draw", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "GET", path: adminDraw(ticket), status: 401, code: "unauthorized", docRefuses: true},

		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", body: sigBody(signed.Signature), status: 401, code: "unauthorized",
			docRefuses: true},
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: `{"sig": "00"}`, status: 400, code: "invalid_input",
			docRefuses: true},
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, status: 400, code: "invalid_input", docRefuses: true},
		{method: "PUT", path: fmt.Sprintf("/admin/v1/sessions/%d/prizes/abc/draw/beacon", sid), token: tok, body: sigBody(signed.Signature),
			status: 400, code: "invalid_input", docRefuses: true},
		// The document sets the signature no length: the body limit refuses it.
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: sigBody(strings.Repeat("ab", 40<<10)),
			status: 413, code: "body_too_large"},
		// Another round's signature, and no hex at all.
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: sigBody(other.Signature), status: 400, code: "invalid_input"},
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: sigBody("not-hex"), status: 400, code: "invalid_input"},
		// A draw that names no beacon round, and a prize without a draw.
		{method: "PUT", path: adminDraw(ticket) + "/beacon", token: tok, body: sigBody(signed.Signature), status: 409, code: "conflict"},
		{method: "PUT", path: adminDraw(poster) + "/beacon", token: tok, body: sigBody(signed.Signature), status: 404, code: "not_found"},
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: sigBody(signed.Signature), status: 200},
		// The same signature again is accepted.
		{method: "PUT", path: adminDraw(beaconTicket) + "/beacon", token: tok, body: sigBody(signed.Signature), status: 200},
	} {
		l := admin
		if strings.HasPrefix(c.path, "/api/") {
			l = public
		}
		l.do(t, c)
	}
	if time.Now().After(start) {
		t.Fatalf("the checks before the draw's session opens ran past its start (%s)", start)
	}

	// The window: entries, each user's one request id, the standing of an entrant.
	time.Sleep(time.Until(start) + 100*time.Millisecond)
	var rids = map[string]string{}
	for _, e := range []struct {
		user, tok string
		prize     int64
	}{{"draw-alice", alice, ticket}, {"draw-bob", bob, ticket}, {"draw-alice", alice, beaconTicket}, {"draw-alice", alice, ticket}} {
		x, v := public.do(t, contractCall{method: "POST", path: grab(e.prize), token: e.tok, status: 202})
		if want := seckill.DrawRequestID(sid, e.prize, e.user); v["status"] != "entered" || v["request_id"] != want ||
			x.Header.Get("Location") != "/api/v1/grabs/"+want {
			t.Fatalf("entry of %s: %v (Location %q)", e.user, v, x.Header.Get("Location"))
		}
		rids[fmt.Sprint(e.user, e.prize)] = v["request_id"].(string)
	}
	if _, st := public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rids[fmt.Sprint("draw-alice", ticket)], token: alice,
		status: 200}); st["status"] != "entered" {
		t.Fatalf("an entrant's standing during the window: %v", st)
	}
	if time.Now().After(start.Add(drawWindow)) {
		t.Fatalf("the entries ran past the draw's window (%s to %s)", start, start.Add(drawWindow))
	}

	// After the window: a newcomer is refused (and from then on the presses without a key
	// are answered from memory), an entrant pressing with a key hears they entered.
	time.Sleep(time.Until(start.Add(drawWindow)) + 200*time.Millisecond)
	public.do(t, contractCall{method: "POST", path: grab(ticket), token: carol, status: 409, code: "entry_closed"})
	public.do(t, contractCall{method: "POST", path: grab(ticket), token: bob, status: 409, code: "entry_closed"})
	if _, v := public.do(t, contractCall{method: "POST", path: grab(ticket), token: bob, status: 202,
		header: map[string]string{"Idempotency-Key": "bob-presses-again-1"}}); v["status"] != "entered" {
		t.Fatalf("an entrant's grab after the window: %v", v)
	}

	// The reconciler's part: freeze both entry sets, rank (the beacon draw with the
	// signature supplied above), admit the winners in rank order.
	entries, err := draw.NewEntries(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	grabs := &drawGrabs{}
	runner := draw.NewRunner(draw.RunnerConfig{Book: book, Entries: entries, Gate: gate, Grabs: grabs, Grace: time.Hour,
		Log: slog.New(slog.DiscardHandler), Now: time.Now})
	var rep draw.Report
	if ok, err := lease.New(db, "contract-draw", time.Minute).Do(ctx, func(ctx context.Context, fence lease.Fence) error {
		var err error
		rep, err = runner.Run(ctx, fence)
		return err
	}); !ok || err != nil {
		t.Fatalf("draw run: acquired %v, %v", ok, err)
	}
	if rep.Frozen != 2 || rep.Drawn != 2 || rep.Admitted != 2 || rep.Waiting != 1 {
		t.Fatalf("draw run: %+v", rep)
	}

	// Drawn: the records, the proofs, the standings, the operator's panel.
	drawn, rec = public.do(t, contractCall{method: "GET", path: publicDraw(ticket), status: 200})
	if rec["phase"] != "drawn" || rec["entries"] != float64(2) || rec["cutoff"] != float64(1) || len(rec["ranking_values"].([]any)) != 2 {
		t.Fatalf("drawn record: %v", rec)
	}
	if _, rec := public.do(t, contractCall{method: "GET", path: publicDraw(beaconTicket), status: 200}); rec["beacon"] == nil ||
		rec["beacon"].(map[string]any)["value"] != signed.Value {
		t.Fatalf("drawn record of the beacon draw: %v", rec)
	}
	places := map[string]float64{}
	for user, tk := range map[string]string{"draw-alice": alice, "draw-bob": bob} {
		_, p := public.do(t, contractCall{method: "GET", path: publicDraw(ticket) + "/proof", token: tk, status: 200})
		places[user], _ = p["place"].(float64)
	}
	winner, loser := "draw-alice", "draw-bob"
	if places[winner] != 1 {
		winner, loser = loser, winner
	}
	if places[winner] != 1 || places[loser] != 2 {
		t.Fatalf("places %v", places)
	}
	public.do(t, contractCall{method: "GET", path: publicDraw(ticket) + "/proof", token: carol, status: 404, code: "not_found"})
	tokens := map[string]string{"draw-alice": alice, "draw-bob": bob}
	public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rids[fmt.Sprint(winner, ticket)], token: tokens[winner], status: 200})
	if _, st := public.do(t, contractCall{method: "GET", path: "/api/v1/grabs/" + rids[fmt.Sprint(loser, ticket)], token: tokens[loser],
		status: 200}); st["status"] != "waitlisted" || st["place"] != float64(2) || st["waitlist_position"] != float64(1) {
		t.Fatalf("the waitlisted entrant's standing: %v", st)
	}
	_, panel := admin.do(t, contractCall{method: "GET", path: adminDraw(ticket), token: tok, status: 200})
	if w := panel["winners"].([]any); len(w) != 1 || w[0].(map[string]any)["user_id"] != winner ||
		panel["entrants"].(map[string]any)["waitlisted"] != float64(1) {
		t.Fatalf("drawn panel: %v", panel)
	}

	// The per-user token bucket (5/s, burst 10) of the proof. (The record's, per address, is
	// the "per-address limit" gateway's.)
	public.until(t, contractCall{method: "GET", path: publicDraw(ticket) + "/proof", token: token("draw-frank")}, http.StatusTooManyRequests, 30)
	return grabs.msgs, drawn
}
