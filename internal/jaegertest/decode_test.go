package jaegertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answer is GET /api/v3/traces/{id} as Jaeger v1.75.0 (v2.12.0) answered it for the
// integration test's batch trace, the timing and SDK attributes left out.
const answer = `{"result":{"resourceSpans":[{"resource":{"attributes":[
 {"key":"service.name","value":{"stringValue":"jaegertest-74589aaf53fd"}},
 {"key":"telemetry.sdk.language","value":{"stringValue":"go"}}]},
 "scopeSpans":[{"scope":{"name":"github.com/seckill-pipeline/seckill/jaegertest-74589aaf53fd"},"spans":[
  {"traceId":"b30973f3c1b64542846772d0edd61d21","spanId":"168d84bcd28c053a","parentSpanId":"1e4cf241d82fa6d5",
   "flags":257,"name":"persist batch","kind":1,
   "links":[{"traceId":"0f443b71b60051614d86c79ce32addbf","spanId":"a893c5fdd280ff2d","flags":769}],"status":{}},
  {"traceId":"b30973f3c1b64542846772d0edd61d21","spanId":"1e4cf241d82fa6d5","flags":257,"name":"poll","kind":1,"status":{}}]}]}]}}`

var batchTrace = []Span{
	{Service: "jaegertest-74589aaf53fd", Operation: "persist batch", TraceID: "b30973f3c1b64542846772d0edd61d21",
		SpanID: "168d84bcd28c053a", ParentSpanID: "1e4cf241d82fa6d5",
		Links: []Link{{TraceID: "0f443b71b60051614d86c79ce32addbf", SpanID: "a893c5fdd280ff2d"}}},
	{Service: "jaegertest-74589aaf53fd", Operation: "poll", TraceID: "b30973f3c1b64542846772d0edd61d21",
		SpanID: "1e4cf241d82fa6d5"},
}

func TestDecodeV3(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		want    []Span
		wantErr string
	}{
		{name: "OTLP JSON, hex ids", body: answer, want: batchTrace},
		{name: "protobuf JSON, base64 ids",
			body: `{"result":{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"s"}}]},
				"scopeSpans":[{"spans":[{"traceId":"swlz88G2RUKEZ3LQ7dYdIQ==","spanId":"Fo2EvNKMBTo=","name":"op",
				"links":[{"traceId":"D0Q7cbYAUWFNhsec4yrdvw==","spanId":"qJPF/dKA/y0="}]}]}]}]}}`,
			want: []Span{{Service: "s", Operation: "op", TraceID: "b30973f3c1b64542846772d0edd61d21", SpanID: "168d84bcd28c053a",
				Links: []Link{{TraceID: "0f443b71b60051614d86c79ce32addbf", SpanID: "a893c5fdd280ff2d"}}}}},
		{name: "not found, in the body", body: `{"error":{"httpCode":404,"message":"No traces found"}}`, wantErr: ErrNotFound.Error()},
		{name: "another error", body: `{"error":{"httpCode":500,"message":"storage down"}}`, wantErr: "query API error 500: storage down"},
		{name: "no result", body: `{}`, wantErr: "without a result"},
		{name: "short span id", body: `{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"b30973f3c1b64542846772d0edd61d21","spanId":"168d","name":"op"}]}]}]}}`,
			wantErr: `span "op": span id: "168d" is not a 8-byte id`},
		{name: "not JSON", body: `<html>`, wantErr: "decode the query API's answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeV3([]byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("spans\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestTraceLookups(t *testing.T) {
	tr := Trace{Spans: append(batchTrace, Span{Service: "other", Operation: "poll"})}
	if s, ok := tr.Span("jaegertest-74589aaf53fd", "poll"); !ok || s.SpanID != "1e4cf241d82fa6d5" {
		t.Errorf("Span(service, poll) = %+v, %v", s, ok)
	}
	if _, ok := tr.Span("jaegertest-74589aaf53fd", "missing"); ok {
		t.Error("Span found an operation that is not there")
	}
	tr.Spans = append(tr.Spans, Span{Service: "other", Operation: "poll"})
	if _, ok := tr.Span("other", "poll"); ok {
		t.Error("Span returned one of two spans of the same service and operation")
	}
	if n := len(tr.Named("poll")); n != 3 {
		t.Errorf("Named(poll) has %d spans, want 3", n)
	}
}

// Await asks again after a 404 (spans still in an exporter's batch) until its condition
// holds, and gives up at its context's end saying what it saw last.
func TestAwaitPollsUntilTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v3/traces/b30973f3c1b64542846772d0edd61d21" {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"httpCode":404,"message":"No traces found"}}`))
			return
		}
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := New(srv.URL + "/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if _, err := c.Trace(ctx, "B30973F3C1B64542846772D0EDD61D21"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("first fetch: err %v, want ErrNotFound", err)
	}
	got, err := c.Await(ctx, "b30973f3c1b64542846772d0edd61d21", func(tr Trace) bool { return len(tr.Named("poll")) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d fetches, want 3 (two 404s, then the trace)", n)
	}
	if !reflect.DeepEqual(got.Spans, batchTrace) || got.ID != "b30973f3c1b64542846772d0edd61d21" {
		t.Errorf("trace %+v", got)
	}

	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = c.Await(short, "b30973f3c1b64542846772d0edd61d21", func(tr Trace) bool { return len(tr.Spans) > 2 })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "2 spans: jaegertest-74589aaf53fd/persist batch, jaegertest-74589aaf53fd/poll") {
		t.Errorf("err %v, want the deadline with the spans seen", err)
	}
}
