package grab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/tracing"
)

// spyGate answers every Reserve with one verdict and keeps the context it was called with.
type spyGate struct {
	verdict stock.Verdict
	ctx     context.Context
}

func (g *spyGate) Reserve(ctx context.Context, _ seckill.Grab) (stock.Verdict, error) {
	g.ctx = ctx
	return g.verdict, nil
}

func (g *spyGate) Lookup(context.Context, string) (stock.Lookup, error) { return stock.Lookup{}, nil }

// keepingWriter keeps the messages it is given and fails the writes when told to.
type keepingWriter struct {
	mu   sync.Mutex
	msgs []kafka.Message
	fail bool
}

func (w *keepingWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msgs...)
	if w.fail {
		return errors.New("kafka unavailable")
	}
	return nil
}

// tracedEnv is the public grab route as main serves it (tracing.Handler around the JSON
// errors around the mux), on a fake gate and Kafka writer, with tr's spans and JSON logs.
type tracedEnv struct {
	h    http.Handler
	api  *API
	gate *spyGate
	w    *keepingWriter
	logs *bytes.Buffer
}

func newTracedEnv(tr *tracing.Tracing, v stock.Verdict, produceFails bool) *tracedEnv {
	gate := &spyGate{verdict: v}
	w := &keepingWriter{fail: produceFails}
	var logs bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&logs, nil)))
	m := testMetrics()
	held := newUnpublished()
	// The user header counts only from a trusted proxy: httptest's requests come from 192.0.2.1.
	a := &API{gate: gate, userHeader: "X-User", userProxies: clientip.New([]netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}),
		schedule: alwaysOpen{}, soldOut: newSoldOutFlags(time.Minute), inflight: make(chan struct{}, 10),
		events: w, topic: "seckill.grab.test", relay: newRelay(w, 10, held, m, log), held: held, produceTTL: time.Second,
		admitTimeout: time.Second, metrics: m, tracing: tr, log: log, now: time.Now, admission: admission.New(admission.Config{Max: 10})}
	mux := http.NewServeMux()
	a.Register(mux)
	return &tracedEnv{h: tr.Handler(jsonapi.Errors(mux), "/healthz", "/readyz", "/metrics"), api: a, gate: gate, w: w, logs: &logs}
}

func (e *tracedEnv) grab(traceparent string) int {
	req := httptest.NewRequest(http.MethodPost, "/api/v1/sessions/7/prizes/9/grab", nil)
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", "trace-key-0001")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec.Code
}

func inMemory() (*tracing.Tracing, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	return tracing.With(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)), "gateway"), exp
}

func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d", name, len(spans))
	return tracetest.SpanStub{}
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// exemplarTrace is the trace_id of the exemplar o holds in any bucket ("" when none).
func exemplarTrace(t *testing.T, o prometheus.Observer) string {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	for _, b := range m.GetHistogram().GetBucket() {
		for _, l := range b.GetExemplar().GetLabel() {
			if l.GetName() == "trace_id" {
				return l.GetValue()
			}
		}
	}
	return ""
}

const grabRoute = "POST /api/v1/sessions/{session}/prizes/{prize}/grab"

// An admitted grab through the real handler chain is one trace: the server span named
// after the route, the admission script's and the produce's spans its children, the event's
// traceparent naming the produce span (so the consumer's spans are its children), and the
// latency histograms' exemplars pointing at the trace.
func TestAdmittedGrabIsOneTraceUpToTheEventHeaders(t *testing.T) {
	tr, exp := inMemory()
	e := newTracedEnv(tr, stock.Verdict{Code: stock.Admitted}, false)
	if code := e.grab(""); code != http.StatusAccepted {
		t.Fatalf("grab answered %d", code)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want server, reserve and produce: %v", len(spans), spans)
	}
	server, reserve, produce := spanNamed(t, spans, grabRoute), spanNamed(t, spans, "stock.reserve"), spanNamed(t, spans, "kafka.produce grab")
	traceID := server.SpanContext.TraceID()
	if server.SpanKind != trace.SpanKindServer || server.Parent.IsValid() {
		t.Fatalf("server span kind %v parent %v, want a root server span", server.SpanKind, server.Parent)
	}
	for _, child := range []tracetest.SpanStub{reserve, produce} {
		if child.Parent.SpanID() != server.SpanContext.SpanID() || child.SpanContext.TraceID() != traceID {
			t.Errorf("%s: parent %s in trace %s, want the server span %s", child.Name, child.Parent.SpanID(), child.SpanContext.TraceID(), server.SpanContext.SpanID())
		}
	}
	rid := seckill.UserRequestID(7, 9, "alice", "trace-key-0001")
	for key, want := range map[string]attribute.Value{
		"outcome": attribute.StringValue("admitted"), "request_id": attribute.StringValue(rid),
		"session_id": attribute.Int64Value(7), "prize_id": attribute.Int64Value(9), "db.system.name": attribute.StringValue("redis"),
	} {
		if got, _ := attrOf(reserve, key); got != want {
			t.Errorf("reserve span %s = %v, want %v", key, got.String(), want.String())
		}
	}
	for key, want := range map[string]attribute.Value{
		"messaging.system": attribute.StringValue("kafka"), "messaging.destination.name": attribute.StringValue("seckill.grab.test"),
		"messaging.kafka.message.key": attribute.StringValue("7:9"), "request_id": attribute.StringValue(rid),
	} {
		if got, _ := attrOf(produce, key); got != want {
			t.Errorf("produce span %s = %v, want %v", key, got.String(), want.String())
		}
	}
	if produce.SpanKind != trace.SpanKindProducer || produce.Status.Code == codes.Error {
		t.Errorf("produce span kind %v status %v", produce.SpanKind, produce.Status)
	}
	if len(e.w.msgs) != 1 {
		t.Fatalf("%d events written", len(e.w.msgs))
	}
	want := "00-" + traceID.String() + "-" + produce.SpanContext.SpanID().String() + "-01"
	if got := header(e.w.msgs[0], "traceparent"); got != want {
		t.Fatalf("event traceparent %q, want the produce span's %q", got, want)
	}
	if header(e.w.msgs[0], "schema") != "grab.v1" {
		t.Fatalf("the event lost its schema header: %v", e.w.msgs[0].Headers)
	}
	for name, o := range map[string]prometheus.Observer{
		"request latency": e.api.metrics.latency.WithLabelValues("grab"),
		"reserve latency": e.api.metrics.redis.WithLabelValues("reserve"),
		"produce latency": e.api.metrics.produce,
	} {
		if got := exemplarTrace(t, o); got != traceID.String() {
			t.Errorf("%s exemplar trace %q, want %s", name, got, traceID)
		}
	}
}

// A grab whose event Kafka did not acknowledge: the produce span says so (error status and
// the error), the relay's copy of the event carries the same traceparent, and the warning
// the gateway logs names the produce span.
func TestUnacknowledgedProduceIsTheProduceSpansError(t *testing.T) {
	tr, exp := inMemory()
	e := newTracedEnv(tr, stock.Verdict{Code: stock.Admitted}, true)
	if code := e.grab(""); code != http.StatusAccepted {
		t.Fatalf("grab answered %d", code)
	}
	produce := spanNamed(t, exp.GetSpans(), "kafka.produce grab")
	if produce.Status.Code != codes.Error || len(produce.Events) == 0 || produce.Events[0].Name != "exception" {
		t.Fatalf("produce span status %v events %v, want the error recorded", produce.Status, produce.Events)
	}
	if q, _ := attrOf(produce, "relay_queued"); !q.AsBool() {
		t.Errorf("relay_queued %v", q.String())
	}
	var relayed *kafka.Message
	select {
	case relayed = <-e.api.relay.queue:
	default:
		t.Fatal("nothing handed to the relay")
	}
	want := "00-" + produce.SpanContext.TraceID().String() + "-" + produce.SpanContext.SpanID().String() + "-01"
	if got := header(*relayed, "traceparent"); got != want {
		t.Fatalf("relayed event traceparent %q, want %q", got, want)
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		if strings.Contains(l, "grab event not acknowledged") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line["trace_id"] != produce.SpanContext.TraceID().String() || line["span_id"] != produce.SpanContext.SpanID().String() {
		t.Fatalf("warning logged without the produce span's ids: %v (log %s)", line, e.logs.String())
	}
}

// Every verdict is the reserve span's outcome; only the verdicts that publish make a
// produce span (a still-queued repeat publishes again), and a 5xx is the server span's error.
func TestReserveOutcomesAndTheirSpans(t *testing.T) {
	for _, tc := range []struct {
		verdict stock.Verdict
		code    int
		outcome string
		produce bool
	}{
		{stock.Verdict{Code: stock.Seen, State: stock.Status{State: "queued"}}, 202, "seen", true},
		{stock.Verdict{Code: stock.Seen, State: stock.Status{State: "succeeded"}}, 202, "seen", false},
		{stock.Verdict{Code: stock.Limit}, 409, "limit", false},
		{stock.Verdict{Code: stock.SoldOut}, 409, "sold_out", false},
		{stock.Verdict{Code: stock.NotLoaded}, 503, "not_loaded", false},
	} {
		name := tc.outcome
		if st := tc.verdict.State.State; st != "" {
			name += ", " + st
		}
		t.Run(name, func(t *testing.T) {
			tr, exp := inMemory()
			e := newTracedEnv(tr, tc.verdict, false)
			if code := e.grab(""); code != tc.code {
				t.Fatalf("answered %d, want %d", code, tc.code)
			}
			spans := exp.GetSpans()
			server, reserve := spanNamed(t, spans, grabRoute), spanNamed(t, spans, "stock.reserve")
			if got, _ := attrOf(reserve, "outcome"); got.AsString() != tc.outcome {
				t.Errorf("outcome %q, want %q", got.AsString(), tc.outcome)
			}
			if n := len(spans); (n == 3) != tc.produce {
				t.Errorf("%d spans; produce expected: %v", n, tc.produce)
			}
			if tc.produce && header(e.w.msgs[0], "traceparent") == "" {
				t.Error("the republished event carries no traceparent")
			}
			if (server.Status.Code == codes.Error) != (tc.code >= 500) {
				t.Errorf("server span status %v for a %d", server.Status, tc.code)
			}
		})
	}
}

// A traceparent from the client or an edge proxy is the grab's parent: the grab continues
// the caller's trace, and its sampling decision (parent-based) is the caller's.
func TestGrabContinuesTheCallersTrace(t *testing.T) {
	tr, exp := inMemory()
	e := newTracedEnv(tr, stock.Verdict{Code: stock.Admitted}, false)
	e.grab("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	server := spanNamed(t, exp.GetSpans(), grabRoute)
	if server.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || server.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("server span in trace %s under %s, want the caller's", server.SpanContext.TraceID(), server.Parent.SpanID())
	}
	if !strings.Contains(header(e.w.msgs[0], "traceparent"), "0af7651916cd43dd8448eb211c80319c") {
		t.Fatalf("the event left the caller's trace: %v", e.w.msgs[0].Headers)
	}

	// A caller that did not sample: no span is recorded, and the event carries no context
	// (the consumer follows sampled grabs only).
	exp.Reset()
	e = newTracedEnv(tr, stock.Verdict{Code: stock.Admitted}, false)
	e.grab("00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Fatalf("%d spans recorded of an unsampled grab: %v", len(spans), spans)
	}
	if got := header(e.w.msgs[0], "traceparent"); got != "" {
		t.Fatalf("unsampled grab's event traceparent %q, want none", got)
	}
}

// Off, the grab path makes no span, passes no span context and writes the event's headers
// as before: no traceparent, even when the client sent one.
func TestGrabWithTracingOffAddsNothing(t *testing.T) {
	for name, tr := range map[string]*tracing.Tracing{"off": tracing.Off(), "nil": nil} {
		e := newTracedEnv(tr, stock.Verdict{Code: stock.Admitted}, false)
		if code := e.grab("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"); code != http.StatusAccepted {
			t.Fatalf("%s: answered %d", name, code)
		}
		if sc := trace.SpanContextFromContext(e.gate.ctx); sc.IsValid() {
			t.Errorf("%s: the gate was called inside a span %v", name, sc)
		}
		if len(e.w.msgs) != 1 || len(e.w.msgs[0].Headers) != 1 || header(e.w.msgs[0], "schema") != "grab.v1" {
			t.Errorf("%s: event headers %v, want the schema alone", name, e.w.msgs[0].Headers)
		}
		if got := exemplarTrace(t, e.api.metrics.latency.WithLabelValues("grab")); got != "" {
			t.Errorf("%s: an exemplar %q without tracing", name, got)
		}
	}
}

// Off, the span helpers on every grab's path allocate nothing (no span, no attributes, no
// header); on, the same calls do allocate, which is what this test would catch leaking into
// the off path.
func TestSpansCostNothingWhenOff(t *testing.T) {
	g := seckill.Grab{RequestID: seckill.RequestID(7, 9, "k"), UserID: "alice", SessionID: 7, PrizeID: 9, AdmittedAt: time.Now()}
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds"})
	allocs := func(ctx context.Context, tr *tracing.Tracing) (float64, *kafka.Message) {
		a := &API{tracing: tr, topic: "grabs"}
		msg, err := event.EncodeGrab(g)
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(100, func() {
			msg.Headers = msg.Headers[:1]
			c, s := a.startReserve(ctx, g)
			a.observe(c, h, 0.001)
			endReserve(s, stock.Verdict{Code: stock.Admitted}, nil)
			c, s = a.startProduce(ctx, g, &msg)
			a.observe(c, h, 0.002)
			endProduce(s, nil, false)
			_, s = a.startReplica(ctx, g)
			endReplica(s, "confirmed", nil)
		}), &msg
	}
	for name, tr := range map[string]*tracing.Tracing{"off": tracing.Off(), "nil": nil} {
		if n, msg := allocs(context.Background(), tr); n != 0 || len(msg.Headers) != 1 {
			t.Errorf("%s: %v allocations per grab, headers %v; want none added", name, n, msg.Headers)
		}
	}
	on, _ := inMemory()
	ctx, server := on.Start(context.Background(), "server")
	defer server.End()
	if n, msg := allocs(ctx, on); n == 0 || header(*msg, "traceparent") == "" {
		t.Errorf("on: %v allocations, headers %v: the measure cannot see spans", n, msg.Headers)
	}
}
