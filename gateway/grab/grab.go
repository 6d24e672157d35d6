// Package grab is the gateway's public grab path: the grab and status-poll handlers behind
// their guard (overload cap, per-IP and per-user limits), admission through the Redis gate,
// the grab event's produce and its relay, the unpublished grabs the reconciler's rebuild guard
// reads, the local sold-out flags and the stock buckets' home and sold-out decisions. main
// builds it from a Config and mounts it with Register; the handlers' tests start it on the
// real stack without the rest of the gateway.
package grab

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/ratelimit"
	"github.com/seckill-pipeline/seckill/gateway/schedule"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// reserver is what the grab handler needs from the Redis gate.
type reserver interface {
	Reserve(ctx context.Context, g seckill.Grab) (stock.Verdict, error)
	Lookup(ctx context.Context, requestID string) (stock.Lookup, error)
}

// ReplicaWaiter confirms that a Redis replica holds a grab's reservation (stock.Gate).
type ReplicaWaiter interface {
	AwaitReplica(ctx context.Context, sessionID, prizeID int64, requestID string, timeout time.Duration) error
}

// OrderFinder reads an order from MySQL, for status polls after the Redis keys expired.
type OrderFinder interface {
	ByRequestID(ctx context.Context, requestID string) (seckill.Order, error)
}

// UserVerifier turns a bearer token into a user id.
type UserVerifier interface {
	User(token string) (string, error)
}

type openChecker interface {
	Check(sessionID, prizeID int64, t time.Time) error
}

// API serves the public grab and status endpoints.
type API struct {
	gate       reserver
	orders     OrderFinder
	verifier   UserVerifier
	userHeader string // upstream header with the user id, believed from userProxies only; "" = JWT only
	schedule   Schedule
	soldOut    *soldOutFlags
	perUser    *ratelimit.Keyed
	perIP      *ratelimit.Keyed
	clients    *clientip.Proxies // whose address a per-IP bucket is (X-Forwarded-For from trusted proxies)
	events     Publisher
	topic      string // the grab events' topic, named on their produce spans
	relay      *relay
	held       *unpublished // admitted grabs not acknowledged by Kafka yet

	// entries and board are the draws' (package draw): entries during a draw prize's window,
	// the public record, proofs and standings; nil: no prize is a draw's.
	entries Entrance
	board   DrawBoard
	// closedDraws remembers that a draw prize's window has closed with its units still the
	// draw's (an entry script said so), like soldOut: the crowd after the window is answered
	// from memory until the flag's recheck.
	closedDraws *soldOutFlags

	// userProxies are the auth proxies whose userHeader is believed (SECKILL_USER_HEADER_PROXIES),
	// a list apart from clients': an X-Forwarded-For proxy passes its clients' headers on.
	userProxies *clientip.Proxies

	// buckets routes grabs and polls of prizes with stock buckets to the user's home
	// bucket (nil: every prize is treated as having none).
	buckets *bucketRouter
	// replica, when set, is asked after a failed produce for a replica's acknowledgement of
	// the reservation, waiting up to replicaWait (see onReplica); nil: the wait is off.
	replica     ReplicaWaiter
	replicaWait time.Duration
	inflight    chan struct{}
	// admission bounds the grabs past the public answers (publicFirst), before their token,
	// admission script and Kafka write: over its adaptive limit a grab is refused at once.
	admission  *admission.Gate
	produceTTL time.Duration
	// admitTimeout bounds the wait for the admission script's verdict.
	admitTimeout time.Duration
	metrics      *metrics
	// tracing makes the grab's child spans (spans.go); nil or off: none, at no cost.
	tracing *tracing.Tracing
	log     *slog.Logger
	now     func() time.Time
}

const grabBodyLimit = 1 << 10

// The answers a crowd gets by the thousand, encoded once (constants in all but syntax): after
// the last unit the sold-out answer is most of what the gateway writes, and under a crowd
// above capacity the refusal is.
var (
	soldOutAnswer    = jsonapi.Encode(http.StatusConflict, jsonapi.Error{Code: "sold_out", Message: "sold out"})
	notOpenAnswer    = jsonapi.Encode(http.StatusConflict, jsonapi.Error{Code: "not_open", Message: "the session is not open"})
	overloadedAnswer = jsonapi.Encode(http.StatusServiceUnavailable, jsonapi.Error{Code: "overloaded",
		Message: "too many requests in flight; retry after the time Retry-After gives"})
)

// Batch is the most grab events one produce request to a partition carries (the writers
// main makes).
const Batch = 100

// admitTimeout is how long the gateway waits for an admission verdict (go-redis retries
// included) before answering 503 with the request id to poll.
const admitTimeout = 5 * time.Second

// Register mounts the grab and status routes on mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/sessions/{session}/prizes/{prize}/grab", a.publicFirst(a.guard("grab", http.HandlerFunc(a.grab))))
	mux.Handle("GET /api/v1/grabs/{request_id}", a.guard("status", http.HandlerFunc(a.status)))
	if a.board != nil {
		a.drawRoutes(mux)
	}
}

// Config is what the grab path is built from; New makes its relay, sold-out flags, stock
// bucket router and unpublished tracking from it.
type Config struct {
	Gate     Gate
	Orders   OrderFinder
	Verifier UserVerifier
	// UserHeader is the upstream header naming the user, believed from UserProxies only; ""
	// = bearer tokens only.
	UserHeader  string
	UserProxies *clientip.Proxies
	Clients     *clientip.Proxies // whose address a per-IP bucket is
	Schedule    Schedule
	// SoldOutRecheck is how long Redis's "sold out" answers keyless grabs from memory.
	SoldOutRecheck time.Duration
	PerUser, PerIP *ratelimit.Keyed // nil: no limit
	Events         Publisher
	Topic          string // the topic Events writes to, for the produce spans
	RelayQueue     int    // grab events the relay holds at most
	MaxInflight    int
	// Admission sets the adaptive limit on grabs doing their Redis and Kafka work
	// (package admission); its Now defaults to Now.
	Admission      admission.Config
	ProduceTimeout time.Duration
	// Replica, when set, confirms a reservation on a Redis replica after a failed produce,
	// waiting up to ReplicaWait; nil: no wait.
	Replica                            ReplicaWaiter
	ReplicaWait                        time.Duration
	BucketOthersCache, BucketWantedTTL time.Duration
	Registry                           prometheus.Registerer
	// Entries and Board are the draws' (package draw); nil: every prize is first come, first
	// served.
	Entries Entrance
	Board   DrawBoard
	// Tracing makes the admission script's and the produce's spans under the request's
	// server span, and carries the trace to the consumer in the event's headers; nil: off.
	Tracing *tracing.Tracing
	Log     *slog.Logger
	Now     func() time.Time
}

// Gate is what the grab path needs from the Redis gate (stock.Gate).
type Gate interface {
	reserver
	bucketGate
}

// Schedule says whether a session×prize is open and how many stock buckets it has
// (schedule.Cache).
type Schedule interface {
	openChecker
	bucketCounts
	drawWindows
}

// New builds the grab path from cfg.
func New(cfg Config) *API {
	held := newUnpublished()
	if cfg.Admission.Now == nil {
		cfg.Admission.Now = cfg.Now
	}
	gate := admission.New(cfg.Admission)
	m := newMetrics(cfg.Registry, gate)
	return &API{
		admission: gate,
		gate:      cfg.Gate, orders: cfg.Orders, verifier: cfg.Verifier, userHeader: cfg.UserHeader,
		schedule: cfg.Schedule, soldOut: newSoldOutFlags(cfg.SoldOutRecheck),
		perUser: cfg.PerUser, perIP: cfg.PerIP,
		clients: cfg.Clients, userProxies: cfg.UserProxies,
		entries: cfg.Entries, board: cfg.Board, closedDraws: newSoldOutFlags(cfg.SoldOutRecheck),
		events: cfg.Events, topic: cfg.Topic, relay: newRelay(cfg.Events, cfg.RelayQueue, held, m, cfg.Log), held: held,
		inflight:   make(chan struct{}, cfg.MaxInflight),
		produceTTL: cfg.ProduceTimeout, admitTimeout: admitTimeout, metrics: m, tracing: cfg.Tracing, log: cfg.Log, now: cfg.Now,
		replica: cfg.Replica, replicaWait: cfg.ReplicaWait,
		buckets: newBucketRouter(cfg.Gate, cfg.Schedule, cfg.BucketOthersCache, cfg.BucketWantedTTL, cfg.Log),
	}
}

// Run flushes the stock buckets' demand until ctx ends.
func (a *API) Run(ctx context.Context) error { return a.buckets.Run(ctx) }

// RunRelay republishes the grab events whose first produce failed until ctx ends, then
// drains within drain. It must stop only after the HTTP servers stopped taking grabs.
func (a *API) RunRelay(ctx context.Context, drain time.Duration) error {
	return a.relay.Run(ctx, drain)
}

// ReportUnpublished beats this gateway's heartbeat (id) with its unpublished grabs every
// interval until ctx ends, then leaves the table; call it until the relay drained.
func (a *API) ReportUnpublished(ctx context.Context, st UnpublishedReporter, id string, every time.Duration) {
	reportUnpublished(ctx, st, id, a.held, every, a.log)
}

// ClearSoldOut drops every sold-out and closed-draw flag (after an admin change to stock or
// sessions).
func (a *API) ClearSoldOut() {
	a.soldOut.Clear()
	a.closedDraws.Clear()
}

// guard applies, in order, the overload cap (cheapest refusal first), latency metrics and
// the per-IP rate limit.
func (a *API) guard(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := &statusRecorder{ResponseWriter: rw, code: http.StatusOK}
		defer func() { a.metrics.responses.WithLabelValues(route, strconv.Itoa(w.code)).Inc() }()
		select {
		case a.inflight <- struct{}{}:
		default:
			a.overloaded(w)
			return
		}
		a.metrics.inflight.Inc()
		start := time.Now()
		defer func() {
			<-a.inflight
			a.metrics.inflight.Dec()
			a.observe(r.Context(), a.metrics.latency.WithLabelValues(route), time.Since(start).Seconds())
		}()
		if ok, wait := a.perIP.Allow(clientip.Bucket(a.clients.Of(r))); !ok {
			a.metrics.grabs.WithLabelValues("rate_limited").Inc()
			ratelimit.TooMany(w, wait)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// overloaded refuses a request the gateway has no room for now, before it cost anything:
// 503 with a Retry-After drawn from 1 to SECKILL_ADMISSION_RETRY_AFTER_MAX seconds, so the
// refused part of a crowd does not come back as one wave.
func (a *API) overloaded(w http.ResponseWriter) {
	a.metrics.overloadedGrabs.Inc()
	w.Header().Set("Retry-After", a.admission.RetryAfter())
	jsonapi.WriteEncoded(w, overloadedAnswer)
}

// publicFirst answers a keyless, bodiless grab whose answer is public before anything else
// is done for it: of a prize this gateway knows is sold out (409 sold_out), or of a session
// not open (409 not_open). No in-flight slot, no rate limit, no token verification (whether
// a prize is sold out or a session open is public), so the crowd before the open and after
// the last unit costs what a trivial handler costs. A keyed grab may repeat one admitted
// before the sell-out or the close and must hear its status; a grab with a body must hear
// what is wrong with it: both take the whole path.
func (a *API) publicFirst(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 && len(r.Header["Idempotency-Key"]) == 0 {
			sid, err1 := jsonapi.ParseID(r.PathValue("session"))
			pid, err2 := jsonapi.ParseID(r.PathValue("prize"))
			if err1 == nil && err2 == nil {
				start, now := time.Now(), a.now()
				answer := soldOutAnswer
				if a.soldOut.Flagged(sid, pid, now) {
					a.metrics.soldOutHits.Inc()
					a.metrics.soldOutGrabs.Inc()
				} else if a.closedDraws.Flagged(sid, pid, now) {
					answer = entryClosedAnswer
					a.metrics.grabs.WithLabelValues("entry_closed").Inc()
				} else if err := a.schedule.Check(sid, pid, now); errors.Is(err, seckill.ErrNotOpen) &&
					!(isNotStarted(err) && a.isDraw(sid, pid)) { // a draw counts its early entries
					answer = notOpenAnswer
					a.metrics.notOpenGrabs.Inc()
				} else {
					next.ServeHTTP(w, r)
					return
				}
				a.metrics.grab409.Inc()
				jsonapi.WriteEncoded(w, answer)
				a.observe(r.Context(), a.metrics.grabLatency, time.Since(start).Seconds())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// statusRecorder remembers the status code a handler wrote, for the responses counter.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// user returns the verified caller, or writes 401. The trusted user header counts only on
// a request from one of its auth proxies (config refuses the header without one): from any
// other peer, an X-Forwarded-For proxy included, it is the client's own claim, and the
// bearer token decides.
func (a *API) user(w http.ResponseWriter, r *http.Request) (string, bool) {
	if a.userHeader != "" && a.userProxies.PeerTrusted(r) {
		// Exactly one value: with a second copy (sent by the client, or merged into one
		// comma-separated line by a proxy) "the user" would be whichever copy came first.
		if vals := r.Header.Values(a.userHeader); len(vals) == 1 && !strings.Contains(vals[0], ",") &&
			seckill.ValidUserID(vals[0]) {
			return vals[0], true
		}
	} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if u, err := a.verifier.User(tok); err == nil {
			return u, true
		}
	}
	a.metrics.grabs.WithLabelValues("unauthorized").Inc()
	w.Header().Set("WWW-Authenticate", `Bearer realm="seckill"`)
	jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	return "", false
}

// limitedUser is user, then the per-user rate limit (a poll, a proof): 401 or 429 written
// when either refuses.
func (a *API) limitedUser(w http.ResponseWriter, r *http.Request) (string, bool) {
	user, ok := a.user(w, r)
	if !ok {
		return "", false
	}
	if ok, wait := a.perUser.Allow(user); !ok {
		ratelimit.TooMany(w, wait)
		return "", false
	}
	return user, true
}

// grabInput is a parsed grab request.
type grabInput struct {
	SessionID, PrizeID int64
	Key                string // the client's Idempotency-Key; "" without one
}

// parseGrab reads the path ids, the Idempotency-Key header and the optional body (at most
// 1 KiB; when present, an empty JSON object: the grab takes no parameters, and a field the
// server does not know is refused rather than ignored).
func parseGrab(w http.ResponseWriter, r *http.Request) (grabInput, error) {
	var in grabInput
	var verr seckill.ValidationError
	var err error
	if in.SessionID, err = jsonapi.ParseID(r.PathValue("session")); err != nil {
		verr = append(verr, seckill.FieldError{Field: "session", Message: err.Error()})
	}
	if in.PrizeID, err = jsonapi.ParseID(r.PathValue("prize")); err != nil {
		verr = append(verr, seckill.FieldError{Field: "prize", Message: err.Error()})
	}
	if vals := r.Header.Values("Idempotency-Key"); len(vals) > 1 {
		verr = append(verr, seckill.FieldError{Field: "Idempotency-Key", Message: "give it once"})
	} else if len(vals) == 1 {
		if !seckill.ValidKey(vals[0]) {
			verr = append(verr, seckill.FieldError{Field: "Idempotency-Key",
				Message: "must be 8 to 64 characters of A-Z a-z 0-9 _ . : -"})
		}
		in.Key = vals[0]
	}
	if len(verr) > 0 {
		return in, verr
	}
	if r.ContentLength != 0 {
		var empty struct{}
		if err := jsonapi.DecodeStrict(w, r, grabBodyLimit, &empty); err != nil {
			return in, err
		}
	}
	return in, nil
}

func (a *API) grab(w http.ResponseWriter, r *http.Request) {
	// The gate comes first: a grab over the limit is refused before it costs anything, its
	// token's verification included; what follows may cost a Redis call and a Kafka write,
	// and waits for both.
	if !a.admission.Enter() {
		a.overloaded(w)
		return
	}
	entered := time.Now()
	defer func() { a.admission.Leave(time.Since(entered)) }()
	user, ok := a.user(w, r)
	if !ok {
		return
	}
	if ok, wait := a.perUser.Allow(user); !ok {
		a.metrics.grabs.WithLabelValues("rate_limited").Inc()
		ratelimit.TooMany(w, wait)
		return
	}
	in, err := parseGrab(w, r)
	if err != nil {
		a.metrics.grabs.WithLabelValues("bad_request").Inc()
		jsonapi.BadInput(w, err)
		return
	}
	now := a.now()
	switch err := a.schedule.Check(in.SessionID, in.PrizeID, now); {
	case errors.Is(err, seckill.ErrNotOpen):
		if end, ok := a.drawWindow(in.SessionID, in.PrizeID); ok && isNotStarted(err) {
			a.enterDraw(w, r, in, user, now, end) // refused and counted
			return
		}
		a.notOpen(w, r, in, user, err)
		return
	case err != nil:
		a.metrics.grabs.WithLabelValues("not_found").Inc()
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "the session has no such prize")
		return
	}
	if end, ok := a.drawWindow(in.SessionID, in.PrizeID); ok && a.enterDraw(w, r, in, user, now, end) {
		return
	}
	// The flag answers only requests that cannot be repeats: a client's Idempotency-Key may
	// belong to a grab admitted before the sell-out (its 202 lost on the way), and that
	// client must hear "queued" again, not "sold out". Keyed requests ask Redis.
	if in.Key == "" && a.soldOut.Flagged(in.SessionID, in.PrizeID, now) {
		a.metrics.soldOutHits.Inc()
		a.metrics.soldOutGrabs.Inc()
		jsonapi.WriteEncoded(w, soldOutAnswer)
		return
	}
	// A client's key names a grab of this user only (seckill.UserRequestID): another user's
	// same key is another grab, in whichever bucket either user's home is.
	var rid string
	if in.Key != "" {
		rid = seckill.UserRequestID(in.SessionID, in.PrizeID, user, in.Key)
	} else {
		id, err := uuid.NewV7() // time-ordered, so request ids sort by admission
		if err != nil {
			a.fail(r.Context(), w, "grab", err)
			return
		}
		rid = seckill.RequestID(in.SessionID, in.PrizeID, id.String())
	}
	g := seckill.Grab{RequestID: rid, UserID: user, SessionID: in.SessionID, PrizeID: in.PrizeID, AdmittedAt: now}
	g.Bucket, g.Buckets = a.buckets.home(user, in.SessionID, in.PrizeID)

	// The verdict is awaited even if the client goes away: once the script may have run,
	// the gateway must know, so an admitted grab is always published.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.admitTimeout)
	defer cancel()
	// Tracked from before the script can admit the grab until its event is acknowledged
	// (see publish): once the script ran, the grab exists only in Redis and here, and the
	// reconciler's rebuild guard must see it in this gateway's report even while the reply
	// is on its way (see unpublished). A verdict that publishes nothing lets it go at once.
	ticket := a.held.admit(event.GrabKey(g))
	sctx, span := a.startReserve(rctx, g)
	start := time.Now()
	v, err := a.gate.Reserve(sctx, g)
	a.observe(sctx, a.metrics.redis.WithLabelValues("reserve"), time.Since(start).Seconds())
	endReserve(span, v, err)
	// An unknown outcome is not published by this gateway whatever the script did (see
	// unknownOutcome), so there is nothing here for the guard to wait for.
	a.held.admitted(ticket, err == nil && (v.Code == stock.Admitted || (v.Code == stock.Seen && v.State.State == "queued")))
	if err != nil {
		a.metrics.redisErrors.WithLabelValues("reserve").Inc()
		a.unknownOutcome(r.Context(), w, g.RequestID, err)
		return
	}
	if g.Buckets > 1 && (v.Code == stock.Admitted || v.Code == stock.SoldOut) {
		a.buckets.count(g)
	}
	switch v.Code {
	case stock.Admitted:
		if relayed := a.publish(r.Context(), g); relayed && !a.onReplica(r.Context(), g) {
			a.notReplicated(w, g.RequestID)
			return
		}
		a.metrics.grabs.WithLabelValues("admitted").Inc()
		jsonapi.Write(w, http.StatusAccepted, grabView{RequestID: g.RequestID, Status: "queued"})
	case stock.Seen:
		// Still queued: the first attempt may never have reached Kafka (its reply was lost
		// and go-redis retried, or the client retried after a 503). Publishing again is
		// harmless (the consumer dedupes by request id) and does not wait for the reconciler.
		if v.State.State == "queued" {
			if relayed := a.publish(r.Context(), g); relayed && !a.onReplica(r.Context(), g) {
				a.notReplicated(w, g.RequestID)
				return
			}
		}
		a.metrics.grabs.WithLabelValues("repeat").Inc()
		jsonapi.Write(w, http.StatusAccepted, viewOf(g.RequestID, v.State))
	case stock.Limit:
		a.metrics.grabs.WithLabelValues("limit").Inc()
		jsonapi.WriteError(w, http.StatusConflict, "limit_reached", "per-user limit reached for this prize")
	case stock.SoldOut:
		if g.Buckets > 1 && !a.bucketSoldOut(r.Context(), w, g, now) {
			return
		}
		a.soldOut.Set(in.SessionID, in.PrizeID, now)
		a.metrics.soldOutGrabs.Inc()
		jsonapi.WriteEncoded(w, soldOutAnswer)
	case stock.NotLoaded:
		a.metrics.grabs.WithLabelValues("not_loaded").Inc()
		w.Header().Set("Retry-After", "1")
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "not_loaded", "stock is not available right now; retry shortly")
	case stock.Foreign:
		// The request id is another user's. Ids of keyed grabs are derived per user, so this
		// takes a digest collision; the script's owner check stays the guard all the same.
		a.metrics.grabs.WithLabelValues("key_conflict").Inc()
		jsonapi.WriteError(w, http.StatusConflict, "idempotency_key_conflict", "this Idempotency-Key is in use by another request")
	case stock.Drawn:
		// A gateway whose schedule did not know the prize is a draw's yet; the script is the
		// guard.
		a.metrics.grabs.WithLabelValues("drawn").Inc()
		jsonapi.WriteError(w, http.StatusConflict, "drawn", "this prize's units are given by its draw")
	default:
		a.fail(r.Context(), w, "grab", errors.New("unknown verdict "+v.Code.String()))
	}
}

// bucketSoldOut decides whether a grab whose home bucket (of g.Buckets) was dry is answered
// sold_out: only when the prize is sold out in every bucket. Otherwise it answers 503
// rebalancing (nothing was admitted: a retry, with the same key or without, is a fresh
// attempt, which a transfer will have given units) and returns false.
func (a *API) bucketSoldOut(ctx context.Context, w http.ResponseWriter, g seckill.Grab, now time.Time) bool {
	soldOut, err := a.buckets.soldOut(ctx, g, now)
	if soldOut {
		return true
	}
	if err != nil {
		// Not knowing the others is not a sold-out: the client retries.
		a.metrics.redisErrors.WithLabelValues("buckets").Inc()
		a.log.WarnContext(ctx, "other buckets not read; answering rebalancing", "request_id", g.RequestID, "bucket", g.Bucket, "error", err.Error())
	}
	a.metrics.grabs.WithLabelValues("rebalancing").Inc()
	w.Header().Set("Retry-After", "1")
	jsonapi.Write(w, http.StatusServiceUnavailable, jsonapi.Error{Code: "rebalancing", RequestID: g.RequestID,
		Message: "this prize's units are being moved to where they are asked for; retry shortly"})
	return false
}

// notOpen answers a grab outside its session's window. A keyed request may repeat a grab
// admitted before the session ended or was closed (its 202 lost on the way), and that client
// must learn the grab's status, not hear "not open": it is looked up like a status poll
// (Redis, then MySQL once the keys are gone). Before a session starts nothing of it can have
// been admitted, so those requests, and keyless ones, are answered from memory.
func (a *API) notOpen(w http.ResponseWriter, r *http.Request, in grabInput, user string, err error) {
	if in.Key != "" && !errors.Is(err, schedule.ErrNotStarted) {
		v, found, err := a.existing(r.Context(), seckill.UserRequestID(in.SessionID, in.PrizeID, user, in.Key), user)
		switch {
		case err != nil:
			a.fail(r.Context(), w, "grab", err)
			return
		case found:
			a.metrics.grabs.WithLabelValues("repeat").Inc()
			jsonapi.Write(w, http.StatusAccepted, v)
			return
		}
	}
	a.metrics.notOpenGrabs.Inc()
	jsonapi.WriteEncoded(w, notOpenAnswer)
}

// unknownOutcome answers a grab whose admission verdict never arrived (Redis error, or no
// reply within admitTimeout). The script may still have run, or run later (a coalesced
// pipeline outlives its callers), so the grab may be admitted: the answer carries the request
// id and its poll URL, so a client that sent no Idempotency-Key can still find out. An
// admission the gateway never heard of is not published by it; the reconciler finds its
// reservation stale and publishes it.
func (a *API) unknownOutcome(ctx context.Context, w http.ResponseWriter, rid string, err error) {
	a.log.ErrorContext(ctx, "admission outcome unknown", "request_id", rid, "error", err.Error())
	a.metrics.grabs.WithLabelValues("unavailable").Inc()
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Location", statusPath(rid))
	jsonapi.Write(w, http.StatusServiceUnavailable, jsonapi.Error{Code: "unavailable", RequestID: rid,
		Message: "outcome not known yet; poll the request id, or retry with the same Idempotency-Key"})
}

func statusPath(rid string) string { return "/api/v1/grabs/" + rid }

// onReplica says whether a grab whose event Kafka did not acknowledge may be answered 202.
// Such a grab lives in this gateway's relay and in its reservation on one Redis primary; the
// reservation reaches the replica asynchronously, so the gateway dying and the primary
// failing over before the copy would leave nothing of a grab the client was promised. With
// the wait on, the 202 waits until a replica acknowledged the reservation. Only this path
// asks: a grab Kafka acknowledged is on two brokers already and pays nothing.
func (a *API) onReplica(ctx context.Context, g seckill.Grab) bool {
	if a.replica == nil {
		return true
	}
	// The client leaving does not cut the wait short: its answer is what the wait decides.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.replicaWait+admitTimeout)
	defer cancel()
	wctx, span := a.startReplica(wctx, g)
	start := time.Now()
	var err error
	if g.Bucket == 0 {
		err = a.replica.AwaitReplica(wctx, g.SessionID, g.PrizeID, g.RequestID, a.replicaWait)
	} else {
		err = a.buckets.gate.AwaitReplicaBucket(wctx, g.SessionID, g.PrizeID, g.Bucket, g.Buckets, g.RequestID, a.replicaWait)
	}
	a.observe(wctx, a.metrics.redis.WithLabelValues("await_replica"), time.Since(start).Seconds())
	result := "confirmed"
	switch {
	case err == nil:
	case errors.Is(err, stock.ErrNotReplicated):
		result = "timeout"
	case errors.Is(err, stock.ErrReservationGone):
		result = "gone"
	default:
		result = "error"
		a.metrics.redisErrors.WithLabelValues("await_replica").Inc()
	}
	a.metrics.replicaWaits.WithLabelValues(result).Inc()
	endReplica(span, result, err)
	if err != nil {
		a.log.WarnContext(ctx, "reservation not confirmed on a Redis replica; answering 503", "request_id", g.RequestID,
			"session_id", g.SessionID, "prize_id", g.PrizeID, "result", result, "error", err.Error())
	}
	return err == nil
}

// notReplicated answers a grab admitted in Redis whose event is in no broker and whose
// reservation no replica confirmed: 503 with the request id, like an unknown outcome. Nothing
// is undone: the relay still holds the event and the reservation is still the durable intent
// (a produce error does not mean "not written", so releasing the unit could meet an order
// made from it); the grab will most likely become an order, and the client learns it by
// polling the request id, or by retrying with the same Idempotency-Key (the script answers
// "seen" and the gateway publishes and waits again).
func (a *API) notReplicated(w http.ResponseWriter, rid string) {
	a.metrics.grabs.WithLabelValues("not_replicated").Inc()
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Location", statusPath(rid))
	jsonapi.Write(w, http.StatusServiceUnavailable, jsonapi.Error{Code: "unavailable", RequestID: rid,
		Message: "admitted but not yet safe against a Redis failover; poll the request id, or retry with the same Idempotency-Key"})
}

// publish emits the grab event and waits for Kafka's acknowledgement. If Kafka does not
// acknowledge in time, the grab is still admitted: the stock stays deducted (a produce error
// does not mean "not written") and the relay, or else the reconciler, publishes it later.
// The caller holds the grab in a.held (from before Reserve); publish releases it once Kafka
// acknowledged, or hands it to the relay, which releases it after its own write. It reports
// whether Kafka did not acknowledge (the grab now rests on the relay and the reservation).
func (a *API) publish(ctx context.Context, g seckill.Grab) (relayed bool) {
	msg, err := event.EncodeGrab(g)
	if err != nil {
		a.held.release(event.GrabKey(g))
		a.log.ErrorContext(ctx, "encode grab event", "request_id", g.RequestID, "error", err.Error())
		return true
	}
	// The client leaving must not cancel the produce of an admitted grab.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.produceTTL)
	defer cancel()
	pctx, span := a.startProduce(pctx, g, &msg) // before the write: msg carries the span's context
	start := time.Now()
	err = a.events.WriteMessages(pctx, msg)
	a.observe(pctx, a.metrics.produce, time.Since(start).Seconds())
	queued := false
	if err == nil {
		a.held.release(msg.Key)
	} else {
		a.metrics.produceErrors.Inc()
		queued = a.relay.Enqueue(msg) // the relay releases it once published or given up
		if !queued {
			a.held.release(msg.Key)
		}
		a.log.WarnContext(pctx, "grab event not acknowledged; relaying", "request_id", g.RequestID,
			"session_id", g.SessionID, "prize_id", g.PrizeID, "relay_queued", queued, "error", err.Error())
	}
	endProduce(span, err, queued)
	return err != nil
}

type grabView struct {
	RequestID string `json:"request_id"`
	Status    string `json:"status"`
	OrderID   int64  `json:"order_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func viewOf(rid string, st stock.Status) grabView {
	if st.State == "" {
		st.State = "queued"
	}
	return grabView{RequestID: rid, Status: st.State, OrderID: st.OrderID, Reason: st.Reason}
}

// status answers a poll from Redis; MySQL is asked only for a request id Redis does not
// know (see existing), so a polling crowd of known grabs never reaches the database.
func (a *API) status(w http.ResponseWriter, r *http.Request) {
	user, ok := a.limitedUser(w, r)
	if !ok {
		return
	}
	rid := r.PathValue("request_id")
	if _, _, _, err := seckill.ParseRequestID(rid); err != nil {
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such grab")
		return
	}
	if dv, found, handled, err := a.windowStatus(r.Context(), rid, user); handled {
		switch {
		case err != nil:
			a.fail(r.Context(), w, "status", err)
		case !found:
			// An entry lost with Redis's last writes lands here too: the entrant enters again.
			jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such grab")
		default:
			jsonapi.Write(w, http.StatusOK, dv)
		}
		return
	}
	v, found, err := a.existing(r.Context(), rid, user)
	switch {
	case errors.Is(err, errKeysLost):
		// Expected while the reconciler rebuilds lost keys: no error to log, a retry to ask for.
		w.Header().Set("Retry-After", "1")
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the prize's stock is being restored; retry")
	case err != nil:
		a.fail(r.Context(), w, "status", err)
	case !found:
		dv, ok, err := a.drawStatus(r.Context(), rid, user)
		switch {
		case err != nil:
			a.fail(r.Context(), w, "status", err)
		case ok:
			jsonapi.Write(w, http.StatusOK, dv)
		default:
			jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such grab")
		}
	default:
		jsonapi.Write(w, http.StatusOK, v)
	}
}

// errKeysLost says a grab is in neither Redis nor MySQL while its session is open and the
// prize's stock keys are missing (lost, and not rebuilt yet): it may have been admitted
// before the loss and be on its way to MySQL, so "not found" could contradict a 202 the
// caller was given. The caller is told to ask again; once the keys are rebuilt (the
// reconciler waits for every admitted grab to reach MySQL first) the answer is certain.
var errKeysLost = errors.New("the prize's stock keys are lost and the grab is not in MySQL yet")

// openNow says whether the session of request id rid is open now.
func (a *API) openNow(rid string) bool {
	sid, pid, _, err := seckill.ParseRequestID(rid)
	return err == nil && a.schedule.Check(sid, pid, a.now()) == nil
}

// existing finds user's grab rid in Redis, and in MySQL's orders only when Redis does not
// know it: the keys are gone (long after the sale), or Redis lost the grab's entry while its
// keys live (a failover drops the last writes of asynchronous replication, and the order
// the consumer settled before it is then only in MySQL; answering "not found" would hide a
// final state from the user who got a 202). Every grab Redis knows, which is a polling crowd's
// every poll, is answered without the database; the lookups it cannot answer are one indexed
// read each, bounded by the per-user and per-IP limits. Someone else's grab is "not found",
// like one never admitted, so ids of other users cannot be probed.
func (a *API) existing(ctx context.Context, rid, user string) (grabView, bool, error) {
	// A prize with buckets keeps the grab in its user's home bucket: someone else's grab is
	// then in no bucket this lookup reads, and MySQL's answer hides it the same way.
	b, n := 0, 1
	if sid, pid, _, err := seckill.ParseRequestID(rid); err == nil {
		b, n = a.buckets.home(user, sid, pid)
	}
	start := time.Now()
	var l stock.Lookup
	var err error
	if b == 0 {
		l, err = a.gate.Lookup(ctx, rid)
	} else {
		l, err = a.buckets.gate.LookupBucket(ctx, rid, b, n)
	}
	a.observe(ctx, a.metrics.redis.WithLabelValues("lookup"), time.Since(start).Seconds())
	if err != nil {
		a.metrics.redisErrors.WithLabelValues("lookup").Inc()
		return grabView{}, false, err
	}
	switch {
	case l.Found && l.Owner == user:
		v := viewOf(rid, l.Status)
		if v.Status == "queued" && seckill.IsDrawRequestID(rid) {
			v.Status = "won" // a unit reserved by the draw, on its way to an order
		}
		return v, true, nil
	case l.Found:
		return grabView{}, false, nil // someone else's grab
	}
	o, err := a.orders.ByRequestID(ctx, rid)
	switch {
	case errors.Is(err, seckill.ErrNotFound) && !l.Live && a.openNow(rid):
		return grabView{}, false, errKeysLost
	case errors.Is(err, seckill.ErrNotFound) || (err == nil && o.UserID != user):
		return grabView{}, false, nil
	case err != nil:
		return grabView{}, false, err
	}
	return grabView{RequestID: rid, Status: string(o.Status), OrderID: orderID(o), Reason: string(o.Reason)}, true, nil
}

// orderID is the order id a poll shows: a succeeded order's, and a cancelled one's (it was
// created, then cancelled); a rejected grab has none to show.
func orderID(o seckill.Order) int64 {
	if o.Status == seckill.OrderSucceeded || o.Status == seckill.OrderCancelled {
		return o.ID
	}
	return 0
}

// fail answers 503 for an infrastructure error (Redis or MySQL unreachable): the client may
// retry with the same Idempotency-Key, which is safe by construction.
func (a *API) fail(ctx context.Context, w http.ResponseWriter, route string, err error) {
	a.log.ErrorContext(ctx, "request failed", "route", route, "error", err.Error())
	trace.SpanFromContext(ctx).RecordError(err) // the request's span, whose status the 503 sets
	if route == "grab" {
		a.metrics.grabs.WithLabelValues("unavailable").Inc()
	}
	w.Header().Set("Retry-After", "1")
	jsonapi.WriteError(w, http.StatusServiceUnavailable, "unavailable", "temporarily unavailable; retry with the same Idempotency-Key")
}
