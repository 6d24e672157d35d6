package grab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/ratelimit"
	"github.com/seckill-pipeline/seckill/gateway/schedule"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

const jwtSecret = "jwt-secret-for-tests-0123456789abcdef"

// grabEnv is a gateway grab API on the real stack with one open session (prizes A and B)
// and one session that opens in an hour.
type grabEnv struct {
	srv     *httptest.Server
	api     *API
	rdb     redis.UniversalClient
	gate    *stock.Gate
	brokers []string
	topics  event.Topics
	signer  *auth.Signer
	open    seckill.Session
	later   seckill.Session
	prizeA  int64
	prizeB  int64
	db      *gorm.DB
}

type tweak func(*API)

func newGrabEnv(t testing.TB, stockA, stockB, limit int, tweaks ...tweak) *grabEnv {
	t.Helper()
	_, db := stacktest.Migrated(t)
	rdb := stacktest.Redis(t)
	stacktest.CleanupKeys(t, rdb, db)
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)

	now := time.Now().UTC()
	cat := store.NewCatalog(db, func() time.Time { return now })
	act, err := cat.CreateActivity(ctx, seckill.Activity{
		Name: "grab test", WindowStart: now.Add(-time.Minute), WindowEnd: now.Add(3 * time.Hour),
		Interval: time.Hour, SessionLength: 50 * time.Minute, PerUserLimit: limit,
		Prizes: []seckill.Prize{{Name: "A", StockPerSession: stockA}, {Name: "B", StockPerSession: stockB}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions, _ := cat.Sessions(ctx, act.ID)
	gate, err := stock.NewGate(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	// Only prize A of the open session is loaded: B stays "not loaded".
	stocks, _ := cat.Stocks(ctx, sessions[0].ID)
	if _, err := gate.Load(ctx, stocks[:1], now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	api, srv := serveGrabs(t, ctx, db, cat, gate, brokers, topics, tweaks...)
	return &grabEnv{srv: srv, api: api, rdb: rdb, gate: gate, brokers: brokers, topics: topics,
		signer: auth.NewSigner([]byte(jwtSecret), "seckill", "seckill-gateway"),
		open:   sessions[0], later: sessions[1], prizeA: act.Prizes[0].ID, prizeB: act.Prizes[1].ID,
		db: db}
}

// serveGrabs serves a grab API on gate, writing grab events to topics, for a test.
func serveGrabs(t testing.TB, ctx context.Context, db *gorm.DB, cat *store.Catalog, gate *stock.Gate, brokers []string,
	topics event.Topics, tweaks ...tweak) (*API, *httptest.Server) {
	t.Helper()
	w, err := event.NewGrabWriter(brokers, topics.Grab.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	verifier, _ := auth.NewVerifier([]byte(jwtSecret), "seckill", "seckill-gateway", time.Now)
	sched := schedule.New(cat, time.Second, time.Now)
	if err := sched.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	m := testMetrics()
	log := slog.New(slog.DiscardHandler)
	api := &API{
		gate: gate, orders: store.NewOrders(db), verifier: verifier, schedule: sched,
		soldOut: newSoldOutFlags(time.Minute), perUser: nil, perIP: nil, events: w,
		relay: newRelay(w, 100, nil, m, log), inflight: make(chan struct{}, 10000), produceTTL: 5 * time.Second,
		admitTimeout: admitTimeout, metrics: m, log: log, now: time.Now,
		admission: admission.New(admission.Config{Max: 10000}),
	}
	for _, tw := range tweaks {
		tw(api)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return api, srv
}

// answer is one HTTP response, decoded.
type answer struct {
	code int
	body map[string]any
	hdr  http.Header
}

func (e *grabEnv) token(t testing.TB, user string) string {
	tok, err := e.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *grabEnv) request(t testing.TB, method, path, token, key, body string) answer {
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, hdr: resp.Header}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func (e *grabEnv) grab(t testing.TB, s seckill.Session, prize int64, user, key string) answer {
	return e.request(t, "POST", fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", s.ID, prize), e.token(t, user), key, "")
}

func expect(t *testing.T, name string, a answer, code int, errCode string) {
	t.Helper()
	if a.code != code || (errCode != "" && a.body["error"] != errCode) {
		t.Fatalf("%s: got %d %v, want %d %s", name, a.code, a.body, code, errCode)
	}
}

func TestGrabAnswers(t *testing.T) {
	e := newGrabEnv(t, 3, 5, 1)
	first := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", first, 202, "")
	rid := first.body["request_id"].(string)
	if rid != seckill.UserRequestID(e.open.ID, e.prizeA, "alice", "alice-key-0001") || first.body["status"] != "queued" {
		t.Fatalf("admitted body %v", first.body)
	}
	again := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "repeat with the same key", again, 202, "")
	if again.body["request_id"] != rid {
		t.Fatalf("repeat answered another request id: %v", again.body)
	}
	// Another user's same key is that user's own grab (TestIdempotencyKeyIsPerUser).
	other := e.grab(t, e.open, e.prizeA, "mallory", "alice-key-0001")
	expect(t, "same key, other user", other, 202, "")
	if other.body["request_id"] == rid {
		t.Fatalf("another user's same key answered alice's request id: %v", other.body)
	}
	expect(t, "limit", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0002"), 409, "limit_reached")
	gen := e.grab(t, e.open, e.prizeA, "bob", "")
	expect(t, "generated key, last unit", gen, 202, "")
	if _, _, key, err := seckill.ParseRequestID(gen.body["request_id"].(string)); err != nil || len(key) != 36 {
		t.Fatalf("generated request id %v: %v", gen.body["request_id"], err)
	}
	expect(t, "sold out", e.grab(t, e.open, e.prizeA, "carol", "carol-key-001"), 409, "sold_out")
	expect(t, "sold out from the flag", e.grab(t, e.open, e.prizeA, "dave", ""), 409, "sold_out")
	if hits := testutil.ToFloat64(e.api.metrics.soldOutHits); hits != 1 {
		t.Fatalf("sold-out flag answered %v times, want 1", hits)
	}
	// A repeat of a grab admitted before the sell-out is not answered "sold out".
	expect(t, "admitted key after sold out", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001"), 202, "")
	expect(t, "not loaded", e.grab(t, e.open, e.prizeB, "alice", "alice-key-0003"), 503, "not_loaded")
	expect(t, "not open yet", e.grab(t, e.later, e.prizeA, "alice", "alice-key-0004"), 409, "not_open")
	expect(t, "unknown session", e.grab(t, seckill.Session{ID: 1}, e.prizeA, "alice", "alice-key-0005"), 409, "not_open")
	expect(t, "unknown prize", e.grab(t, e.open, 1, "alice", "alice-key-0006"), 404, "not_found")

	path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeB)
	tok := e.token(t, "erin")
	expect(t, "no token", e.request(t, "POST", path, "", "", ""), 401, "unauthorized")
	expired, _ := e.signer.Token("erin", time.Now().Add(-2*time.Hour), time.Hour)
	expect(t, "expired token", e.request(t, "POST", path, expired, "", ""), 401, "unauthorized")
	forged, _ := auth.NewSigner([]byte("another-secret-another-secret-xxxxx"), "seckill", "seckill-gateway").Token("erin", time.Now(), time.Hour)
	expect(t, "forged token", e.request(t, "POST", path, forged, "", ""), 401, "unauthorized")
	expect(t, "bad key", e.request(t, "POST", path, tok, "short", ""), 400, "invalid_input")
	expect(t, "bad key chars", e.request(t, "POST", path, tok, "key with spaces", ""), 400, "invalid_input")
	expect(t, "unknown JSON field", e.request(t, "POST", path, tok, "", `{"quantity": 5}`), 400, "invalid_input")
	expect(t, "not JSON", e.request(t, "POST", path, tok, "", `quantity=5`), 400, "invalid_input")
	expect(t, "huge body", e.request(t, "POST", path, tok, "", `{"a":"`+strings.Repeat("x", 4096)+`"}`), 413, "body_too_large")
	expect(t, "empty object is fine", e.request(t, "POST", path, tok, "erin-key-0001", `{}`), 503, "not_loaded")
	expect(t, "bad session id", e.request(t, "POST", "/api/v1/sessions/x/prizes/1/grab", tok, "", ""), 400, "invalid_input")

	// Nothing the refused requests did moved the stock.
	snap, _ := e.gate.Snapshots(context.Background(), []seckill.SessionPrize{{Session: e.open.ID, Prize: e.prizeA}})
	if snap[0].Left != 0 || snap[0].Pending != 3 {
		t.Fatalf("stock after the matrix: %+v, want left 0 with 3 reservations", snap[0])
	}
}

func TestStatusPolling(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 1)
	a := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", a, 202, "")
	rid := a.body["request_id"].(string)
	st := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "queued" {
		t.Fatalf("owner's poll: %d %v", st.code, st.body)
	}
	expect(t, "another user's request id", e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "bob"), "", ""), 404, "not_found")
	expect(t, "unknown request id", e.request(t, "GET", "/api/v1/grabs/"+seckill.RequestID(e.open.ID, e.prizeA, "never-admitted"), e.token(t, "alice"), "", ""), 404, "not_found")
	expect(t, "malformed request id", e.request(t, "GET", "/api/v1/grabs/nonsense", e.token(t, "alice"), "", ""), 404, "not_found")
	expect(t, "no token", e.request(t, "GET", "/api/v1/grabs/"+rid, "", "", ""), 401, "unauthorized")

	err := e.db.Exec(`INSERT INTO orders (request_id, user_id, session_id, prize_id, status, reason,
		per_user_limit, slot, admitted_at, created_at) VALUES (?, 'alice', ?, ?, 'succeeded', '', 1, 1, NOW(6), NOW(6))`,
		rid, e.open.ID, e.prizeA).Error
	if err != nil {
		t.Fatal(err)
	}
	// A Redis failover lost the grab's reservation and outcome while the prize's keys live
	// (the last writes of asynchronous replication): the poll finds the order in MySQL.
	k := stock.KeysFor(e.open.ID, e.prizeA)
	e.rdb.HDel(context.Background(), k.Reserved, rid)
	e.rdb.HDel(context.Background(), k.Outcomes, rid)
	st = e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "succeeded" {
		t.Fatalf("poll of a grab Redis lost while its keys live: %d %v, want the order from MySQL", st.code, st.body)
	}
	// Long after the sale the keys are gone; the poll falls back to the order in MySQL.
	e.rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes)
	st = e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "succeeded" || st.body["order_id"] == nil {
		t.Fatalf("poll from MySQL: %d %v", st.code, st.body)
	}
	expect(t, "another user's order in MySQL", e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "bob"), "", ""), 404, "not_found")
}

// While the open session's stock keys are lost (a flush, a restart that lost them) and
// before the reconciler rebuilds them, a grab admitted before the loss may still be on its
// way to MySQL: its poll says "retry", never "not found", which would contradict its 202.
func TestStatusWhileTheKeysAreLostSaysRetry(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 1)
	a := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", a, 202, "")
	rid := a.body["request_id"].(string)
	k := stock.KeysFor(e.open.ID, e.prizeA)
	if err := e.rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes).Err(); err != nil {
		t.Fatal(err)
	}
	st := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	expect(t, "poll of a grab admitted before the keys were lost", st, 503, "unavailable")
	if st.hdr.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	err := e.db.Exec(`INSERT INTO orders (request_id, user_id, session_id, prize_id, status, reason,
		per_user_limit, slot, admitted_at, created_at) VALUES (?, 'alice', ?, ?, 'succeeded', '', 1, 1, NOW(6), NOW(6))`,
		rid, e.open.ID, e.prizeA).Error
	if err != nil {
		t.Fatal(err)
	}
	st = e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
	if st.code != 200 || st.body["status"] != "succeeded" {
		t.Fatalf("poll once the order is in MySQL: %d %v", st.code, st.body)
	}
	// Another user's grab stays "not found", keys or not: ids of others cannot be probed.
	expect(t, "another user's order", e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "bob"), "", ""), 404, "not_found")
}

// 500 users grab a stock of 100 at once through HTTP: exactly 100 are admitted and exactly
// 100 grab events reach the topic.
func TestConcurrentGrabsExactlyStockAndEvents(t *testing.T) {
	e := newGrabEnv(t, 100, 1, 1)
	var mu sync.Mutex
	codes := map[int]int{}
	admitted := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := e.grab(t, e.open, e.prizeA, fmt.Sprintf("user-%03d", i), fmt.Sprintf("key-%08d", i))
			mu.Lock()
			defer mu.Unlock()
			codes[a.code]++
			if a.code == 202 {
				admitted[a.body["request_id"].(string)] = true
			}
		}()
	}
	wg.Wait()
	if codes[202] != 100 || codes[409] != 400 {
		t.Fatalf("answers %v, want 100×202 and 400×409", codes)
	}
	snap, _ := e.gate.Snapshots(context.Background(), []seckill.SessionPrize{{Session: e.open.ID, Prize: e.prizeA}})
	if snap[0].Left != 0 {
		t.Fatalf("redis left %d, want 0", snap[0].Left)
	}

	msgs, err := harness.ReadTopic(stacktest.Context(t, 30*time.Second), e.brokers, e.topics.Grab)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range msgs {
		g, err := event.DecodeGrab(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[g.RequestID]++
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct grab events on the topic, want 100", len(seen))
	}
	for rid, n := range seen {
		if !admitted[rid] || n != 1 {
			t.Fatalf("event %s seen %d times, admitted=%v", rid, n, admitted[rid])
		}
	}
}

func TestRateLimitAndOverload(t *testing.T) {
	e := newGrabEnv(t, 100, 1, 100, func(a *API) {
		a.perUser = ratelimit.NewKeyed(1, 2, 100, time.Now)
	})
	var got []int
	for i := range 4 {
		got = append(got, e.grab(t, e.open, e.prizeA, "alice", fmt.Sprintf("alice-key-%04d", i)).code)
	}
	if got[0] != 202 || got[1] != 202 || got[2] != 429 {
		t.Fatalf("answers %v, want 202 202 429 ...", got)
	}
	a := e.grab(t, e.open, e.prizeA, "alice", "alice-key-9999")
	if a.code != 429 || a.hdr.Get("Retry-After") == "" {
		t.Fatalf("rate limited answer %d %v", a.code, a.hdr)
	}
	// Another user is not limited by alice's bucket.
	expect(t, "other user", e.grab(t, e.open, e.prizeA, "bob", "bob-key-0001"), 202, "")

	// The in-flight cap answers 503 at once instead of queueing.
	full := &API{inflight: make(chan struct{}, 1), metrics: e.api.metrics, admission: e.api.admission}
	block, release := make(chan struct{}), make(chan struct{})
	h := full.guard("grab", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(block)
		<-release
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/", nil))
	<-block
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
	close(release)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d, want 503 with Retry-After", rec.Code)
	}
}

// A retry with the same Idempotency-Key of a grab admitted before the session was closed
// (its 202 lost on the way) learns the grab's status, from Redis while the keys live and
// from MySQL after; only a key that was never admitted hears "not open".
func TestKeyedRetryAfterSessionClosed(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	first := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "admitted", first, 202, "")
	rid := first.body["request_id"].(string)

	if _, err := store.NewCatalog(e.db, time.Now).CloseSession(ctx, e.open.ID, "test", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.api.schedule.(*schedule.Cache).Reload(ctx); err != nil {
		t.Fatal(err)
	}
	again := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "keyed retry after close", again, 202, "")
	if again.body["request_id"] != rid || again.body["status"] != "queued" {
		t.Fatalf("keyed retry after close answered %v", again.body)
	}
	expect(t, "new key after close", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0002"), 409, "not_open")
	expect(t, "another user's key after close", e.grab(t, e.open, e.prizeA, "bob", "alice-key-0001"), 409, "not_open")
	expect(t, "keyless after close", e.grab(t, e.open, e.prizeA, "alice", ""), 409, "not_open")
	expect(t, "key before the session opened", e.grab(t, e.later, e.prizeA, "alice", "alice-key-0001"), 409, "not_open")

	// Long after the sale the keys are gone: the verdict comes from the order in MySQL.
	err := e.db.Exec(`INSERT INTO orders (request_id, user_id, session_id, prize_id, status, reason,
		per_user_limit, slot, admitted_at, created_at) VALUES (?, 'alice', ?, ?, 'succeeded', '', 1, 1, NOW(6), NOW(6))`,
		rid, e.open.ID, e.prizeA).Error
	if err != nil {
		t.Fatal(err)
	}
	k := stock.KeysFor(e.open.ID, e.prizeA)
	e.rdb.Del(ctx, k.Meta, k.Users, k.Reserved, k.Outcomes)
	late := e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001")
	expect(t, "keyed retry after the keys expired", late, 202, "")
	if late.body["request_id"] != rid || late.body["status"] != "succeeded" || late.body["order_id"] == nil {
		t.Fatalf("keyed retry from MySQL answered %v", late.body)
	}
	expect(t, "another user's key from MySQL", e.grab(t, e.open, e.prizeA, "bob", "alice-key-0001"), 409, "not_open")
	expect(t, "never admitted, keys gone", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0003"), 409, "not_open")
}

// An admission script that ran after the gateway stopped waiting for it (here: its reply
// delayed past the admission timeout) is answered 503 with the request id and a Location to
// poll, so even a client that sent no Idempotency-Key can find its admitted grab.
func TestLateAdmissionVerdictAnswersRequestID(t *testing.T) {
	e, proxy := lateVerdictEnv(t)
	proxy.HoldNext()
	a := e.grab(t, e.open, e.prizeA, "alice", "")
	expect(t, "late verdict", a, 503, "unavailable")
	rid, _ := a.body["request_id"].(string)
	if _, _, _, err := seckill.ParseRequestID(rid); err != nil {
		t.Fatalf("503 body %v carries no request id", a.body)
	}
	if loc := a.hdr.Get("Location"); loc != "/api/v1/grabs/"+rid {
		t.Fatalf("Location %q, want the poll URL of %s", loc, rid)
	}
	if a.hdr.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	// The script did run: the poll finds the admitted grab.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.request(t, "GET", "/api/v1/grabs/"+rid, e.token(t, "alice"), "", "")
		if st.code == 200 && st.body["status"] == "queued" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("poll of %s: %d %v", rid, st.code, st.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// With SECKILL_TRUST_USER_HEADER the header must name exactly one user: a client that adds
// a second copy (or a proxy that merges copies into one comma-separated line) is refused
// rather than served as whichever value comes first.
func TestTrustedUserHeaderNamesOneUser(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 1, func(a *API) {
		a.userHeader = "X-User-Id"
		a.userProxies = clientip.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}) // the test is the auth proxy
	})
	path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA)
	for _, tc := range []struct {
		name   string
		values []string
		want   int
	}{
		{"one value", []string{"alice"}, 202},
		{"two header lines", []string{"bob", "mallory"}, 401},
		{"merged into one line", []string{"bob, mallory"}, 401},
		{"merged without a space", []string{"bob,mallory"}, 401},
		{"none", nil, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.srv.URL+path, nil)
			for _, v := range tc.values {
				req.Header.Add("X-User-Id", v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	snap, _ := e.gate.Snapshots(context.Background(), []seckill.SessionPrize{{Session: e.open.ID, Prize: e.prizeA}})
	if snap[0].Pending != 1 {
		t.Fatalf("%d reservations, want only the one-user request's", snap[0].Pending)
	}
}

// A grab body, when present, must be a JSON object: `null` (or any other JSON value) is
// refused, not read as "no body".
func TestGrabBodyMustBeAnObject(t *testing.T) {
	e := newGrabEnv(t, 5, 5, 10)
	path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA)
	tok := e.token(t, "alice")
	for i, body := range []string{`null`, ` null `, `[]`, `"grab"`, `1`, `true`} {
		t.Run(body, func(t *testing.T) {
			expect(t, body, e.request(t, "POST", path, tok, fmt.Sprintf("alice-key-%04d", i), body), 400, "invalid_input")
		})
	}
	expect(t, "empty object", e.request(t, "POST", path, tok, "alice-key-0100", `{}`), 202, "")
}

// lateVerdictEnv is a grab env whose gate reaches Redis through a proxy that holds back the
// replies it is told to (HoldNext) for 800 ms, past the gateway's admission timeout of
// 150 ms: the script runs, its verdict arrives after the gateway stopped waiting.
func lateVerdictEnv(t *testing.T) (*grabEnv, *harness.Proxy) {
	t.Helper()
	proxy, err := harness.NewProxy(stacktest.SingleRedisAddr(t), 1, 0, 800*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// A read timeout longer than the delay: go-redis does not retry; the gateway gives up first.
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { slow.Close() })
	slowGate, err := stock.NewGate(stacktest.Context(t, 10*time.Second), slow, stock.WithCoalescing(8, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slowGate.Close)
	e := newGrabEnv(t, 5, 5, 1, func(a *API) {
		a.gate = slowGate
		a.admitTimeout = 150 * time.Millisecond
	})
	return e, proxy
}
