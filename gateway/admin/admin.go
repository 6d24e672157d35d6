// Package admin is the gateway's admin listener's API: activities, sessions and their stock,
// the exceptions workbench, the live overview and the profiles, every route behind an
// operator's credential whose role the route table (Routes) allows. The gateway mounts it
// with Register; the table is what the server mounts from and the tests walk.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/lockout"
	"github.com/seckill-pipeline/seckill/gateway/operator"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// adminCatalog is what the admin API needs from the system of record.
type adminCatalog interface {
	CreateActivity(ctx context.Context, a seckill.Activity) (seckill.Activity, error)
	Activities(ctx context.Context, limit int) ([]seckill.Activity, error)
	Activity(ctx context.Context, id int64) (seckill.Activity, error)
	Sessions(ctx context.Context, activityID int64) ([]seckill.Session, error)
	Session(ctx context.Context, id int64) (seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
	bucketedCatalog
	PrizeStock(ctx context.Context, sessionID, prizeID int64) (store.PrizeStock, error)
	PlanBucketAdjustment(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string) (store.BucketAdjustment, error)
	CloseSession(ctx context.Context, id int64, actor, remote string) (seckill.Session, error)
	Audit(ctx context.Context, sessionID int64, limit int) ([]store.AuditEntry, error)
}

// adminGate is what the admin API needs from the Redis gate: each prize as Redis sees it,
// summed over its stock buckets.
type adminGate interface {
	PrizeSnapshots(ctx context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error)
}

type sessionPreheater interface {
	Session(ctx context.Context, id int64) (preheat.Result, error)
	Adjust(ctx context.Context, sessionID, prizeID int64, total int, actor, remote, reason string) (preheat.Adjustment, error)
}

// consoleSessions verifies operator console sign-ins: a *console.Console.
type consoleSessions interface {
	Verify(r *http.Request) (actor string, ok bool)
}

// operatorTokens names the operator whose admin token a bearer credential is, and what that
// operator may do: an *operator.Credentials.
type operatorTokens interface {
	Authenticate(token string) (name string, ok bool)
	Role(name string) operator.Role
}

// API serves the operator API. Every route requires an operator's admin bearer token, or a
// signed-in operator console session (checked again on every call), whose credential's role
// allows the route (Routes).
type API struct {
	catalog   adminCatalog
	gate      adminGate
	preheater sessionPreheater
	console   consoleSessions // nil: bearer token only
	onChange  func()          // refreshes the gateway's schedule cache after close/adjust
	tokens    operatorTokens
	remote    func(*http.Request) string // the client's address, for the audit
	buckets   bucketSettings
	log       *slog.Logger
	// mounted are the patterns handle mounted, unlisted those it refused because the route
	// table does not name them (complete reports both).
	mounted  map[string]bool
	unlisted []string
	// lockout throttles failed bearer authentications per client (nil: never), and
	// authFailures counts refused credentials by reason (nil: not counted).
	lockout      *lockout.Lockout
	authFailures *prometheus.CounterVec
	// The other handlers on the admin listener, mounted by Register through handle.
	workbench *workbench
	overview  *overview
	prizePage *prizePage
	draws     *drawAdmin
	metrics   http.Handler
}

// catalog is what the admin API, the overview and the prize's page read and change in the
// system of record: a *store.Catalog.
type catalog interface {
	adminCatalog
	auditor
	overviewCatalog
	prizePageCatalog
}

// gate is what they read of the Redis gate: a *stock.Gate.
type gate interface {
	adminGate
	prizePageGate
}

// cases is what the workbench and the overview read and change of the exception cases: a
// *store.Exceptions.
type cases interface {
	caseStore
	openCaseCounter
}

// Config is what the admin listener's API is made of.
type Config struct {
	Catalog   catalog
	Gate      gate
	Preheater sessionPreheater
	// Tokens are the operators' credentials; Console their console sign-ins (nil: bearer
	// tokens only).
	Tokens  operatorTokens
	Console consoleSessions
	// Remote names the client of a request, for the audit and the lockout.
	Remote func(*http.Request) string
	// OnChange refreshes the gateway's schedule cache after a create, close or adjust.
	OnChange func()
	// BucketUnits and BucketMax decide a new prize's stock buckets (SECKILL_BUCKET_UNITS,
	// SECKILL_BUCKET_MAX).
	BucketUnits, BucketMax int
	// Lockout throttles wrong bearer tokens per client (nil: never); AuthFailures counts
	// refused credentials by reason (nil: not counted).
	Lockout      *lockout.Lockout
	AuthFailures *prometheus.CounterVec
	// The exceptions workbench's cases, orders and reconciler reports; Replay produces a
	// case's events again; OnCaseAction counts an operator's action on a case.
	Cases        cases
	Orders       orderReader
	Runs         runReader
	Replay       store.Replay
	OnCaseAction func(action, kind string, refused bool)
	// The overview's Kafka, the consumer group whose lag it shows and the topics.
	Kafka  overviewKafka
	Group  string
	Topics event.Topics
	// Draws are the draws' records (nil: the draw routes are not mounted, and the route
	// table's rows for them are reported).
	Draws drawBook
	// Metrics serves GET /metrics (the scrape credential's one route).
	Metrics http.Handler
	Now     func() time.Time
	Log     *slog.Logger
}

// New returns the admin API of cfg; Register mounts it.
func New(cfg Config) *API {
	a := newAdmin(cfg.Catalog, cfg.Gate, cfg.Preheater, cfg.Tokens, cfg.Remote, cfg.OnChange, cfg.Log)
	a.buckets = bucketSettings{units: cfg.BucketUnits, max: cfg.BucketMax}
	a.lockout, a.authFailures, a.console = cfg.Lockout, cfg.AuthFailures, cfg.Console
	a.workbench = &workbench{cases: cfg.Cases, orders: cfg.Orders, runs: cfg.Runs, replay: cfg.Replay,
		fail: a.fail, now: cfg.Now, onActed: cfg.OnCaseAction}
	a.overview = &overview{catalog: cfg.Catalog, gate: cfg.Gate, kafka: cfg.Kafka, cases: cfg.Cases, group: cfg.Group,
		topics: cfg.Topics, now: cfg.Now, fail: a.fail}
	a.prizePage = &prizePage{catalog: cfg.Catalog, gate: cfg.Gate, now: cfg.Now, fail: a.fail}
	a.draws = &drawAdmin{book: cfg.Draws, audit: cfg.Catalog, fail: a.fail}
	a.metrics = cfg.Metrics
	return a
}

// Register mounts every admin route on mux behind the credential check, and reports a route
// mounted outside the route table or a row of the table nothing mounted: the gateway refuses
// to start with either, so no route goes unchecked or undocumented.
func (a *API) Register(mux *http.ServeMux) error {
	a.register(mux)
	a.workbench.register(a, mux)
	a.handle(mux, "GET /admin/v1/overview", a.overview.serve)
	a.prizePage.register(a, mux)
	a.draws.register(a, mux)
	a.handle(mux, "GET /metrics", a.metrics.ServeHTTP)
	return a.complete()
}

// bucketSettings decide a new prize's number of stock buckets (docs/design.md):
// SECKILL_BUCKET_UNITS and SECKILL_BUCKET_MAX.
type bucketSettings struct {
	units int // a prize that names none gets ceil(stock / units), at most max; 0: one
	max   int // the most a prize may have, named or derived
}

// of returns the buckets of a prize that named none.
func (s bucketSettings) of(stock int) int {
	if s.units <= 0 || stock <= s.units {
		return 1
	}
	return min((stock+s.units-1)/s.units, max(s.max, 1))
}

// apply fills in the buckets of the prizes that named none and refuses named ones beyond the
// cap, or beyond the prize's stock (a bucket that starts with no unit only answers sold_out).
func (s bucketSettings) apply(a *seckill.Activity) error {
	var errs seckill.ValidationError
	for i := range a.Prizes {
		p := &a.Prizes[i]
		switch {
		case p.Buckets == 0 && p.IsDraw():
			p.Buckets = 1 // a draw admits its winners in one place (seckill.Activity.Validate)
		case p.Buckets == 0:
			p.Buckets = s.of(p.StockPerSession)
		case p.Buckets > s.max:
			errs = append(errs, seckill.FieldError{Field: fmt.Sprintf("prizes[%d].buckets", i),
				Message: fmt.Sprintf("must be 1 to %d (SECKILL_BUCKET_MAX)", s.max)})
		case p.Buckets > max(p.StockPerSession, 1):
			errs = append(errs, seckill.FieldError{Field: fmt.Sprintf("prizes[%d].buckets", i),
				Message: fmt.Sprintf("must be at most the stock (%d): a bucket must start with a unit", p.StockPerSession)})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

const adminBodyLimit = 64 << 10

func newAdmin(c adminCatalog, g adminGate, p sessionPreheater, tokens operatorTokens, remote func(*http.Request) string,
	onChange func(), log *slog.Logger) *API {
	return &API{catalog: c, gate: g, preheater: p, onChange: onChange, tokens: tokens, remote: remote, log: log,
		mounted: map[string]bool{}}
}

// Route is one row of the admin route table: a ServeMux pattern ("METHOD /path") and the
// least role that may call it.
type Route struct {
	Pattern string
	Role    operator.Role
}

// Routes is the admin listener's route table: every route behind a credential and the least
// role that may call it. The server mounts its handlers only through it (handle refuses a
// pattern it does not name, Register a row nothing mounted), and TestAdminRoutesByRole walks
// every row with every role, so what runs, what is tested and what is documented are one
// list. The console's page, sign-in and probes are not in it: they need no credential.
func Routes() []Route {
	const (
		scrape   = operator.RoleScrape
		viewer   = operator.RoleViewer
		op       = operator.RoleOperator
		adminish = operator.RoleAdmin
	)
	return []Route{
		{"GET /metrics", scrape},

		{"GET /admin/v1/activities", viewer},
		{"GET /admin/v1/activities/{id}", viewer},
		{"GET /admin/v1/sessions/{id}", viewer},
		{"GET /admin/v1/sessions/{id}/audit", viewer},
		{"GET /admin/v1/sessions/{id}/prizes/{prize}", viewer},
		{"GET /admin/v1/sessions/{id}/prizes/{prize}/draw", viewer},
		{"GET /admin/v1/overview", viewer},
		{"GET /admin/v1/exceptions", viewer},
		{"GET /admin/v1/exceptions/{id}", viewer},
		{"GET /admin/v1/reconciler/reports", viewer},

		{"POST /admin/v1/activities", op},
		{"POST /admin/v1/sessions/{id}/preheat", op},
		{"POST /admin/v1/sessions/{id}/close", op},
		{"PUT /admin/v1/sessions/{id}/prizes/{prize}/stock", op},
		{"PUT /admin/v1/sessions/{id}/prizes/{prize}/draw/beacon", op},
		{"POST /admin/v1/exceptions/{id}/{action}", op},

		// Profiles show the process's insides (and a CPU profile costs the sale a little).
		{"GET /debug/pprof/", adminish},
		{"GET /debug/pprof/profile", adminish},
		{"GET /debug/pprof/trace", adminish},
		{"GET /debug/pprof/symbol", adminish},
	}
}

// handle mounts one more admin route behind the credential check, with the role the route
// table gives it; a pattern the table does not name is not mounted (complete reports it).
func (a *API) handle(mux *http.ServeMux, pattern string, h http.HandlerFunc) {
	for _, rt := range Routes() {
		if rt.Pattern == pattern {
			mux.Handle(pattern, a.authorized(rt, h))
			a.mounted[pattern] = true
			return
		}
	}
	a.unlisted = append(a.unlisted, pattern)
}

// complete reports a route mounted outside the route table or a row of the table nothing
// mounted.
func (a *API) complete() error {
	var errs []error
	for _, p := range a.unlisted {
		errs = append(errs, fmt.Errorf("admin route %q is not in the route table", p))
	}
	for _, rt := range Routes() {
		if !a.mounted[rt.Pattern] {
			errs = append(errs, fmt.Errorf("admin route table row %q has no handler", rt.Pattern))
		}
	}
	return errors.Join(errs...)
}

// register mounts the admin routes on mux behind the credential check.
func (a *API) register(mux *http.ServeMux) {
	route := func(pattern string, h http.HandlerFunc) { a.handle(mux, pattern, h) }
	route("POST /admin/v1/activities", a.createActivity)
	route("GET /admin/v1/activities", a.listActivities)
	route("GET /admin/v1/activities/{id}", a.getActivity)
	route("GET /admin/v1/sessions/{id}", a.getSession)
	route("POST /admin/v1/sessions/{id}/preheat", a.preheatSession)
	route("POST /admin/v1/sessions/{id}/close", a.closeSession)
	route("PUT /admin/v1/sessions/{id}/prizes/{prize}/stock", a.adjustStock)
	route("GET /admin/v1/sessions/{id}/audit", a.sessionAudit)
	// Profiles for diagnosing a slow sale, for admins only (Routes).
	route("GET /debug/pprof/", pprof.Index)
	route("GET /debug/pprof/profile", pprof.Profile)
	route("GET /debug/pprof/trace", pprof.Trace)
	route("GET /debug/pprof/symbol", pprof.Symbol)
}

// authorized lets a request through with "Authorization: Bearer <token>" of an operator's
// credential (compared in constant time with every credential's), or with a valid operator
// console session, when that credential's role allows rt's (else 403: who you are is known,
// what you asked is not yours to do); either way the actor of the audit logs is the
// credential's name, and X-Admin-Actor is ignored (a name the caller types would let one
// token act as another operator, or as the reconciler).
//
// Every refusal is logged and counted (refused). A client whose bearer tokens were wrong
// too often within the lockout's window is answered 429 before its token is looked at, so
// guessing costs the guesser the window and the gateway a map lookup.
func (a *API) authorized(rt Route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote := a.remote(r)
		raw, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		name, ok := "", false
		switch {
		case bearer:
			if blocked, wait := a.lockout.Blocked(clientip.Bucket(remote)); blocked {
				a.count("throttled")
				secs := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				jsonapi.WriteError(w, http.StatusTooManyRequests, "rate_limited",
					fmt.Sprintf("too many wrong admin tokens from this address; retry after %ds", secs))
				return
			}
			if name, ok = a.tokens.Authenticate(raw); !ok {
				a.refused(r, rt, remote, "invalid_token", "")
				if a.lockout.Fail(clientip.Bucket(remote)) {
					a.log.Warn("admin authentication throttled", "remote_addr", remote, "route", rt.Pattern,
						"reason", "invalid_token")
				}
			}
		case a.console != nil:
			name, ok = a.console.Verify(r)
			if !ok {
				a.refused(r, rt, remote, "missing", "")
			}
		default:
			a.refused(r, rt, remote, "missing", "")
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="seckill-admin"`)
			jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "admin bearer token required")
			return
		}
		// Looked up on every request: a role lowered in the tokens file holds at once.
		if role := a.tokens.Role(name); !role.Allows(rt.Role) {
			a.refused(r, rt, remote, "forbidden", name)
			jsonapi.WriteError(w, http.StatusForbidden, "forbidden",
				fmt.Sprintf("credential %s has role %s; this route needs %s", name, role, rt.Role))
			return
		}
		c := caller{name: name, remote: remote}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// refused logs and counts a refused credential: the client, the route and why, never what
// was presented (a wrong token is often a mistyped right one); actor names the credential a
// forbidden request was made with.
func (a *API) refused(r *http.Request, rt Route, remote, reason, actor string) {
	a.count(reason)
	attrs := []slog.Attr{slog.String("remote_addr", remote), slog.String("route", rt.Pattern), slog.String("reason", reason)}
	if actor != "" {
		attrs = append(attrs, slog.String("actor", actor), slog.String("role_needed", rt.Role.String()))
	}
	a.log.LogAttrs(r.Context(), slog.LevelWarn, "admin authentication refused", attrs...)
}

func (a *API) count(reason string) {
	if a.authFailures != nil {
		a.authFailures.WithLabelValues(reason).Inc()
	}
}

// caller is who made an admin request: the credential's name and the client's address.
type caller struct {
	name, remote string
}

type callerKey struct{}

// actor names who made a change in the audit log: the name of the credential that signed
// the request (bearer token or console session).
func actor(r *http.Request) string {
	if c, ok := r.Context().Value(callerKey{}).(caller); ok {
		return c.name
	}
	return "admin"
}

// remoteAddr is the address the audited request came from (X-Forwarded-For only as far as
// trusted proxies vouch for it).
func remoteAddr(r *http.Request) string {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c.remote
}

type prizeInput struct {
	Name  string               `json:"name"`
	Stock *jsonapi.WholeNumber `json:"stock"`
	// Buckets is the prize's number of stock buckets (absent: from the settings).
	Buckets *jsonapi.WholeNumber `json:"buckets"`
	// Admission is "fcfs" (absent: first come, first served) or "draw", with its
	// EntryWindow ("10s": how long after the session's open entries are taken).
	Admission   string `json:"admission"`
	EntryWindow string `json:"entry_window"`
}

type activityInput struct {
	Name          string               `json:"name"`
	WindowStart   string               `json:"window_start"`
	WindowEnd     string               `json:"window_end"`
	Interval      string               `json:"interval"`
	SessionLength string               `json:"session_length"`
	PerUserLimit  *jsonapi.WholeNumber `json:"per_user_limit"`
	// PaymentTimeout ("15m"; "" or "0s": none) and RegrabAfterCancel: see seckill.Activity.
	PaymentTimeout    string       `json:"payment_timeout"`
	RegrabAfterCancel bool         `json:"regrab_after_cancel"`
	Prizes            []prizeInput `json:"prizes"`
}

// domain converts the input, collecting parse errors by field; semantic checks are the
// domain's (seckill.Activity.Validate).
func (in activityInput) domain() (seckill.Activity, error) {
	var errs seckill.ValidationError
	parseTime := func(field, v string) time.Time {
		// RFC 3339 (and the document's date-time) allow a lower-case t and z; Go's parser
		// wants them upper-case, and nothing else in the form has a case.
		t, err := time.Parse(time.RFC3339, strings.ToUpper(v))
		if err == nil && !offsetInRange(v) {
			err = errors.New("offset out of range")
		}
		if err != nil {
			errs = append(errs, seckill.FieldError{Field: field, Message: "want an RFC 3339 time, e.g. 2026-11-29T10:00:00Z"})
		}
		return t.UTC()
	}
	parseDur := func(field, v string) time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, seckill.FieldError{Field: field, Message: "want a duration, e.g. 30m"})
		}
		return d
	}
	a := seckill.Activity{
		Name:          in.Name,
		WindowStart:   parseTime("window_start", in.WindowStart),
		WindowEnd:     parseTime("window_end", in.WindowEnd),
		Interval:      parseDur("interval", in.Interval),
		SessionLength: parseDur("session_length", in.SessionLength),
		PerUserLimit:  1,
	}
	if in.PerUserLimit != nil {
		a.PerUserLimit = int(*in.PerUserLimit)
	}
	if in.PaymentTimeout != "" {
		a.PaymentTimeout = parseDur("payment_timeout", in.PaymentTimeout)
	}
	a.RegrabAfterCancel = in.RegrabAfterCancel
	for i, p := range in.Prizes {
		if p.Stock == nil {
			errs = append(errs, seckill.FieldError{Field: fmt.Sprintf("prizes[%d].stock", i), Message: "is required"})
			continue
		}
		prize := seckill.Prize{Name: p.Name, StockPerSession: int(*p.Stock), Admission: seckill.Admission(p.Admission)}
		if p.EntryWindow != "" {
			prize.EntryWindow = parseDur(fmt.Sprintf("prizes[%d].entry_window", i), p.EntryWindow)
		}
		if p.Buckets != nil {
			if *p.Buckets < 1 {
				errs = append(errs, seckill.FieldError{Field: fmt.Sprintf("prizes[%d].buckets", i), Message: "must be at least 1 (1: no buckets)"})
				continue
			}
			prize.Buckets = int(*p.Buckets)
		}
		a.Prizes = append(a.Prizes, prize)
	}
	if len(errs) > 0 {
		return a, errs
	}
	return a, a.Validate()
}

type prizeView struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Stock   int    `json:"stock_per_session"`
	Buckets int    `json:"buckets"`
	// Admission is "fcfs" or "draw"; EntryWindow the draw's ("0s" for fcfs).
	Admission   string `json:"admission"`
	EntryWindow string `json:"entry_window"`
}

type activityView struct {
	ID            int64     `json:"id"`
	Name          string    `json:"name"`
	WindowStart   time.Time `json:"window_start"`
	WindowEnd     time.Time `json:"window_end"`
	Interval      string    `json:"interval"`
	SessionLength string    `json:"session_length"`
	PerUserLimit  int       `json:"per_user_limit"`
	// PaymentTimeout is "0s" when the activity has none.
	PaymentTimeout    string        `json:"payment_timeout"`
	RegrabAfterCancel bool          `json:"regrab_after_cancel"`
	Status            string        `json:"status"`
	Prizes            []prizeView   `json:"prizes"`
	Sessions          []sessionView `json:"sessions,omitempty"`
}

func viewActivity(a seckill.Activity) activityView {
	v := activityView{ID: a.ID, Name: a.Name, WindowStart: a.WindowStart, WindowEnd: a.WindowEnd,
		Interval: a.Interval.String(), SessionLength: a.SessionLength.String(), PerUserLimit: a.PerUserLimit,
		PaymentTimeout: a.PaymentTimeout.String(), RegrabAfterCancel: a.RegrabAfterCancel,
		Status: string(a.Status), Prizes: []prizeView{}}
	for _, p := range a.Prizes {
		admission := p.Admission
		if admission == "" {
			admission = seckill.AdmissionFCFS
		}
		v.Prizes = append(v.Prizes, prizeView{ID: p.ID, Name: p.Name, Stock: p.StockPerSession, Buckets: max(p.Buckets, 1),
			Admission: string(admission), EntryWindow: p.EntryWindow.String()})
	}
	return v
}

type dbStockView struct {
	Total   int   `json:"total"`
	Left    int   `json:"left"`
	Version int64 `json:"version"`
}

type stockView struct {
	PrizeID int64 `json:"prize_id"`
	// Buckets is the session×prize's number of stock buckets; DB's total and left and Redis's
	// figures are summed over them (prizeFigures).
	Buckets int            `json:"buckets"`
	DB      dbStockView    `json:"db"`
	Redis   stock.Snapshot `json:"redis"`
}

type sessionView struct {
	ID         int64       `json:"id"`
	ActivityID int64       `json:"activity_id"`
	Seq        int         `json:"seq"`
	Start      time.Time   `json:"start"`
	End        time.Time   `json:"end"`
	ClosedAt   *time.Time  `json:"closed_at,omitempty"`
	Stock      []stockView `json:"stock"`
}

// sessionViews joins sessions with their stock as MySQL and as Redis see it, side by side.
func (a *API) sessionViews(ctx context.Context, sessions []seckill.Session) ([]sessionView, error) {
	ids := make([]int64, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	stocks, err := a.catalog.Stocks(ctx, ids...)
	if err != nil {
		return nil, err
	}
	// A bucketed prize's row and keys are bucket 0's share only: show the buckets' sums. The
	// version stays bucket 0's row's (the one an adjustment would check).
	snaps, err := prizeFigures(ctx, a.catalog, a.gate, stocks)
	if err != nil {
		return nil, err
	}
	bySession := map[int64][]stockView{}
	for i, s := range stocks {
		v := stockView{PrizeID: s.PrizeID, Buckets: s.BucketCount(),
			DB: dbStockView{Total: s.Total, Left: s.Left, Version: s.Version}, Redis: snaps[i]}
		bySession[s.SessionID] = append(bySession[s.SessionID], v)
	}
	out := make([]sessionView, len(sessions))
	for i, s := range sessions {
		out[i] = sessionView{ID: s.ID, ActivityID: s.ActivityID, Seq: s.Seq, Start: s.Start, End: s.End,
			ClosedAt: s.ClosedAt, Stock: bySession[s.ID]}
		if out[i].Stock == nil {
			out[i].Stock = []stockView{}
		}
	}
	return out, nil
}

func (a *API) createActivity(w http.ResponseWriter, r *http.Request) {
	var in activityInput
	if err := jsonapi.DecodeStrict(w, r, adminBodyLimit, &in); err != nil {
		jsonapi.BadInput(w, err)
		return
	}
	act, err := in.domain()
	if err == nil {
		err = a.buckets.apply(&act)
	}
	if err != nil {
		jsonapi.BadInput(w, err)
		return
	}
	created, err := a.catalog.CreateActivity(r.Context(), act)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("activity created", "activity_id", created.ID, "actor", actor(r), "name", created.Name)
	sessions, err := a.catalog.Sessions(r.Context(), created.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := viewActivity(created)
	if v.Sessions, err = a.sessionViews(r.Context(), sessions); err != nil {
		a.fail(w, r, err)
		return
	}
	a.onChange()
	jsonapi.Write(w, http.StatusCreated, v)
}

func (a *API) listActivities(w http.ResponseWriter, r *http.Request) {
	acts, err := a.catalog.Activities(r.Context(), 100)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]activityView, len(acts))
	for i, act := range acts {
		out[i] = viewActivity(act)
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"activities": out})
}

func (a *API) getActivity(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	act, err := a.catalog.Activity(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	sessions, err := a.catalog.Sessions(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := viewActivity(act)
	if v.Sessions, err = a.sessionViews(r.Context(), sessions); err != nil {
		a.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

func (a *API) getSession(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	s, err := a.catalog.Session(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	views, err := a.sessionViews(r.Context(), []seckill.Session{s})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, views[0])
}

func (a *API) preheatSession(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	res, err := a.preheater.Session(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("session preheated", "session_id", id, "actor", actor(r), "loaded", res.Loaded, "kept", res.Kept)
	jsonapi.Write(w, http.StatusOK, res)
}

func (a *API) closeSession(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	s, err := a.catalog.CloseSession(r.Context(), id, actor(r), remoteAddr(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.onChange()
	a.log.Info("session closed", "session_id", id, "actor", actor(r))
	views, err := a.sessionViews(r.Context(), []seckill.Session{s})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, views[0])
}

type adjustInput struct {
	Total  *jsonapi.WholeNumber `json:"total"`
	Reason string               `json:"reason"`
}

func (a *API) adjustStock(w http.ResponseWriter, r *http.Request) {
	sid, pid, ok := sessionPrizePath(w, r)
	if !ok {
		return
	}
	var in adjustInput
	if err := jsonapi.DecodeStrict(w, r, adminBodyLimit, &in); err != nil {
		jsonapi.BadInput(w, err)
		return
	}
	var verr seckill.ValidationError
	if in.Total == nil {
		verr = append(verr, seckill.FieldError{Field: "total", Message: "is required"})
	}
	if !jsonapi.TextOK(in.Reason, 512) {
		verr = append(verr, seckill.FieldError{Field: "reason", Message: "must be 1 to 512 characters (it goes to the audit log)"})
	}
	if len(verr) > 0 {
		jsonapi.BadInput(w, verr)
		return
	}
	// A prize with stock buckets is adjusted through the transfers journal (its N never
	// changes, so reading it first is safe; the plan checks it again under the row lock).
	// Any error here (no such prize) is left to the path below, which answers it as always.
	if ps, err := a.catalog.PrizeStock(r.Context(), sid, pid); err == nil && ps.Buckets > 1 {
		a.adjustBuckets(w, r, sid, pid, int(*in.Total), strings.Trim(in.Reason, jsonapi.Blank))
		return
	}
	// MySQL and a preheated key change together, or neither does (grabs already admitted in
	// Redis: 409). An absent key gets the new total from MySQL at preheat.
	adj, err := a.preheater.Adjust(r.Context(), sid, pid, int(*in.Total), actor(r), remoteAddr(r), strings.Trim(in.Reason, jsonapi.Blank))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.onChange()
	a.log.Info("stock adjusted", "session_id", sid, "prize_id", pid, "actor", actor(r),
		"before", adj.Before.Total, "after", adj.After.Total, "redis_loaded", adj.RedisUpdated)
	jsonapi.Write(w, http.StatusOK, map[string]any{
		"session_id": sid, "prize_id": pid, "before": adj.Before.Total, "after": adj.After.Total, "redis_updated": adj.RedisUpdated})
}

// adjustBuckets plans the adjustment of a prize with stock buckets: transfers from or to
// outside the prize in the journal, which the reconciler holding the lease runs (only it can
// fence their steps), so the answer is 202 with the plan; the prize's total shows the new
// value once they ran (docs/design.md, "Stock adjustment").
func (a *API) adjustBuckets(w http.ResponseWriter, r *http.Request, sid, pid int64, total int, reason string) {
	adj, err := a.catalog.PlanBucketAdjustment(r.Context(), sid, pid, total, actor(r), remoteAddr(r), reason)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.onChange()
	type planned struct {
		ID     int64 `json:"id"`
		Bucket int   `json:"bucket"`
		Units  int   `json:"units"` // added to the bucket (> 0) or taken from it (< 0)
	}
	transfers := make([]planned, 0, len(adj.Transfers))
	for _, t := range adj.Transfers {
		p := planned{ID: t.ID, Bucket: t.To, Units: t.Requested}
		if t.To == store.Outside {
			p.Bucket, p.Units = t.From, -t.Requested
		}
		transfers = append(transfers, p)
	}
	a.log.Info("stock adjustment planned", "session_id", sid, "prize_id", pid, "actor", actor(r),
		"before", adj.Before.Total, "after", adj.Total, "transfers", len(transfers))
	jsonapi.Write(w, http.StatusAccepted, map[string]any{
		"session_id": sid, "prize_id": pid, "before": adj.Before.Total, "after": adj.Total, "buckets": adj.Before.Buckets,
		"state": "planned", "transfers": transfers})
}

func (a *API) sessionAudit(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	entries, err := a.catalog.Audit(r.Context(), id, 200)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"entries": entries})
}

// pathID reads a path id with the public API's parser: canonical form only, so "07" or
// "+7" is refused instead of acting on (and auditing) id 7 under another spelling.
func pathID(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := jsonapi.ParseID(r.PathValue(name))
	if err != nil {
		jsonapi.Write(w, http.StatusBadRequest, jsonapi.Error{Code: "invalid_input", Message: name + " must be a positive integer",
			Fields: []seckill.FieldError{{Field: name, Message: "must be a positive integer"}}})
		return 0, false
	}
	return id, true
}

// sessionPrizePath reads the {id} and {prize} of a /admin/v1/sessions/{id}/prizes/{prize}
// route, answering 400 for either when it is not an id.
func sessionPrizePath(w http.ResponseWriter, r *http.Request) (sessionID, prizeID int64, ok bool) {
	if sessionID, ok = pathID(w, r, "id"); ok {
		prizeID, ok = pathID(w, r, "prize")
	}
	return sessionID, prizeID, ok
}

// fail maps an error from the catalog, gate or preheater to a status, once, and logs what
// is not the caller's fault.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var verr seckill.ValidationError
	switch {
	case errors.As(err, &verr):
		jsonapi.BadInput(w, err)
	case errors.Is(err, seckill.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, store.ErrStarted), errors.Is(err, preheat.ErrStarted):
		jsonapi.WriteError(w, http.StatusConflict, "session_started", err.Error())
	case errors.Is(err, store.ErrEnded):
		jsonapi.WriteError(w, http.StatusConflict, "session_ended", err.Error())
	case errors.Is(err, store.ErrBucketed):
		jsonapi.WriteError(w, http.StatusConflict, "bucketed", err.Error())
	case errors.Is(err, seckill.ErrConflict), errors.Is(err, stock.ErrAdmitted), errors.Is(err, stock.ErrNewerRevision):
		jsonapi.WriteError(w, http.StatusConflict, "conflict", err.Error())
	default:
		a.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		jsonapi.WriteError(w, http.StatusInternalServerError, "internal", "internal error; see the gateway log")
	}
}

// offsetInRange reports whether an RFC 3339 time's numeric offset, if it has one, names a
// real one: hours 00 to 23, minutes 00 to 59. Go's parser takes "+24:00" and "+23:60",
// which RFC 3339 (time-numoffset) and the admin document refuse.
func offsetInRange(v string) bool {
	if len(v) < 6 || (v[len(v)-6] != '+' && v[len(v)-6] != '-') || v[len(v)-3] != ':' {
		return true // "Z", or no offset Go's parser would have taken
	}
	h, m := v[len(v)-5:len(v)-3], v[len(v)-2:]
	return h <= "23" && m <= "59"
}
