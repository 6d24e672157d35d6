// Package jaegertest reads traces back from a Jaeger query API for tests: one trace by id,
// its spans with service, operation, parent and links, polled until what the test waits for
// has arrived (spans reach Jaeger asynchronously, after each process's batch export). It
// also finds the local stack's Jaeger (deploy/local/stack up with SECKILL_TRACING=1).
package jaegertest

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Stack is where the local stack's Jaeger is: the OTLP/HTTP endpoint to export to
// (SECKILL_JAEGER_OTLP_ENDPOINT, what OTEL_EXPORTER_OTLP_ENDPOINT takes) and the query URL
// (SECKILL_JAEGER_QUERY_URL). The stack writes both to its env file only when it started
// Jaeger. Without them the test is skipped, under CI too (the secure and cluster profiles'
// runs have no Jaeger), unless SECKILL_TRACING=1 says it must be up, as make test and make
// fresh-runs do: then it fails.
func Stack(tb testing.TB) (otlpEndpoint, queryURL string) {
	tb.Helper()
	otlpEndpoint, queryURL = os.Getenv("SECKILL_JAEGER_OTLP_ENDPOINT"), os.Getenv("SECKILL_JAEGER_QUERY_URL")
	if otlpEndpoint == "" || queryURL == "" {
		msg := "jaeger unavailable: SECKILL_JAEGER_OTLP_ENDPOINT or SECKILL_JAEGER_QUERY_URL unset " +
			"(start it with: SECKILL_TRACING=1 deploy/local/stack up)"
		if os.Getenv("SECKILL_TRACING") == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return otlpEndpoint, queryURL
}

// ProcessEnv is the environment for a process a test wants traced into the stack's Jaeger
// (stacktest.Start's env, harness.Options' GatewayEnv and ConsumerEnv): the OTLP endpoint,
// every trace sampled, and spans exported every 100 ms instead of every 5 s, so the test
// waits less for them. Skipped, or failed, as Stack says without a Jaeger.
func ProcessEnv(tb testing.TB) map[string]string {
	tb.Helper()
	otlp, _ := Stack(tb)
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
		"OTEL_TRACES_SAMPLER":         "always_on",
		"OTEL_BSP_SCHEDULE_DELAY":     "100",
	}
}

// Link is one span link: the linked span's trace and span ids, lower-case hex.
type Link struct {
	TraceID string
	SpanID  string
}

// Span is one span as Jaeger stored it. Ids are lower-case hex (as trace.TraceID.String
// and trace.SpanID.String print them); ParentSpanID is "" for a root span.
type Span struct {
	Service      string // the resource's service.name
	Operation    string // the span's name
	TraceID      string
	SpanID       string
	ParentSpanID string
	Links        []Link
}

// Trace is one trace's spans, in the order Jaeger returned them.
type Trace struct {
	ID    string
	Spans []Span
}

// Named returns the spans called operation, of any service.
func (t Trace) Named(operation string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.Operation == operation {
			out = append(out, s)
		}
	}
	return out
}

// Span returns the one span of service called operation, and false when there is none or
// more than one.
func (t Trace) Span(service, operation string) (Span, bool) {
	var found []Span
	for _, s := range t.Named(operation) {
		if s.Service == service {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return Span{}, false
	}
	return found[0], true
}

// ErrNotFound is Jaeger's answer for a trace it holds no span of (yet).
var ErrNotFound = errors.New("trace not found")

// Client reads traces from one Jaeger query service.
type Client struct {
	base string
	http *http.Client
}

// New is a client of the Jaeger query service at queryURL (http://127.0.0.1:16686).
func New(queryURL string) *Client {
	return &Client{base: strings.TrimRight(queryURL, "/"), http: &http.Client{Timeout: 10 * time.Second}}
}

// Trace fetches the trace traceID (32 hex digits) once, through the query API v3
// (GET /api/v3/traces/{id}: OTLP JSON, which carries links as they were sent). A trace
// Jaeger has no span of is ErrNotFound.
func (c *Client) Trace(ctx context.Context, traceID string) (Trace, error) {
	id := strings.ToLower(traceID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v3/traces/"+id, nil)
	if err != nil {
		return Trace{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Trace{}, fmt.Errorf("get trace %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Trace{}, fmt.Errorf("get trace %s: %w", id, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return Trace{}, fmt.Errorf("get trace %s: %w", id, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return Trace{}, fmt.Errorf("get trace %s: %s: %s", id, resp.Status, truncate(body))
	}
	spans, err := decodeV3(body)
	if err != nil {
		return Trace{}, fmt.Errorf("get trace %s: %w", id, err)
	}
	return Trace{ID: id, Spans: spans}, nil
}

// Await fetches the trace traceID until until holds for it, every 200 ms, and returns it;
// at ctx's end it returns what it saw last with an error saying why it stopped. A trace not
// there yet, and a failed fetch, are tried again: the spans may still be in an exporter's
// batch, or Jaeger still starting.
func (c *Client) Await(ctx context.Context, traceID string, until func(Trace) bool) (Trace, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last Trace
	var lastErr error
	for {
		t, err := c.Trace(ctx, traceID)
		if err == nil {
			last, lastErr = t, nil
			if until(t) {
				return t, nil
			}
		} else if ctx.Err() == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return last, fmt.Errorf("trace %s: %w (last fetch: %v)", traceID, ctx.Err(), lastErr)
			}
			return last, fmt.Errorf("trace %s: %w before the condition held (%d spans: %s)", traceID, ctx.Err(), len(last.Spans), last.summary())
		case <-tick.C:
		}
	}
}

// summary names each span as service/operation, for a failure message.
func (t Trace) summary() string {
	names := make([]string, len(t.Spans))
	for i, s := range t.Spans {
		names[i] = s.Service + "/" + s.Operation
	}
	return strings.Join(names, ", ")
}

// The query API v3's answer to GET /api/v3/traces/{id}: OTLP's ExportTraceServiceRequest in
// its JSON form under "result" (ids hex, as OTLP JSON specifies), or an error.
type v3Answer struct {
	Result *struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []struct {
					Key   string `json:"key"`
					Value struct {
						StringValue string `json:"stringValue"`
					} `json:"value"`
				} `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []struct {
					TraceID      string `json:"traceId"`
					SpanID       string `json:"spanId"`
					ParentSpanID string `json:"parentSpanId"`
					Name         string `json:"name"`
					Links        []struct {
						TraceID string `json:"traceId"`
						SpanID  string `json:"spanId"`
					} `json:"links"`
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	} `json:"result"`
	Error *struct {
		HTTPCode int    `json:"httpCode"`
		Message  string `json:"message"`
	} `json:"error"`
}

func decodeV3(body []byte) ([]Span, error) {
	var a v3Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decode the query API's answer: %w: %s", err, truncate(body))
	}
	if a.Error != nil {
		if a.Error.HTTPCode == http.StatusNotFound {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("query API error %d: %s", a.Error.HTTPCode, a.Error.Message)
	}
	if a.Result == nil {
		return nil, fmt.Errorf("query API answer without a result: %s", truncate(body))
	}
	var out []Span
	for _, rs := range a.Result.ResourceSpans {
		service := ""
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				service = kv.Value.StringValue
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				span := Span{Service: service, Operation: s.Name}
				var err error
				if span.TraceID, err = hexID(s.TraceID, 16); err != nil {
					return nil, fmt.Errorf("span %q: trace id: %w", s.Name, err)
				}
				if span.SpanID, err = hexID(s.SpanID, 8); err != nil {
					return nil, fmt.Errorf("span %q: span id: %w", s.Name, err)
				}
				if s.ParentSpanID != "" {
					if span.ParentSpanID, err = hexID(s.ParentSpanID, 8); err != nil {
						return nil, fmt.Errorf("span %q: parent span id: %w", s.Name, err)
					}
				}
				for _, l := range s.Links {
					var link Link
					if link.TraceID, err = hexID(l.TraceID, 16); err != nil {
						return nil, fmt.Errorf("span %q: link trace id: %w", s.Name, err)
					}
					if link.SpanID, err = hexID(l.SpanID, 8); err != nil {
						return nil, fmt.Errorf("span %q: link span id: %w", s.Name, err)
					}
					span.Links = append(span.Links, link)
				}
				out = append(out, span)
			}
		}
	}
	return out, nil
}

// hexID reads an id of n bytes as OTLP JSON writes it (hex) or as protobuf's JSON mapping
// writes bytes (base64), and returns it as lower-case hex.
func hexID(s string, n int) (string, error) {
	if len(s) == 2*n {
		if b, err := hex.DecodeString(s); err == nil {
			return hex.EncodeToString(b), nil
		}
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == n {
		return hex.EncodeToString(b), nil
	}
	return "", fmt.Errorf("%q is not a %d-byte id in hex or base64", s, n)
}

func truncate(b []byte) string {
	const max = 512
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
