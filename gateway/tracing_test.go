package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/otlptest"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// A tracing setting the gateway does not support stops it at start, naming the variable,
// before it connects to anything.
func TestGatewayRefusesBadTracingSettings(t *testing.T) {
	for key, value := range map[string]string{
		"OTEL_TRACES_SAMPLER":         "sometimes",
		"OTEL_TRACES_SAMPLER_ARG":     "2",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_EXPORTER":        "zipkin",
	} {
		getenv := stacktest.Getenv(map[string]string{
			"SECKILL_ADMIN_TOKEN": testAdminToken, "SECKILL_JWT_SECRET": "test-jwt-secret-0123456789-0123456789",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", key: value,
		})
		err := run(context.Background(), getenv, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: run returned %v, want an error naming the variable", key, value, err)
		}
	}
}

// With an OTLP endpoint the gateway traces its requests (span names from the routes, no
// span for probes), puts the sampled trace ids on its latency histograms (OpenMetrics only,
// the text format stays for other scrapers), and flushes the spans still queued when it
// stops: the batch delay here is a minute, so spans arrive only through the shutdown flush.
func TestGatewayTracesRequestsAndFlushesAtShutdown(t *testing.T) {
	stacktest.Redis(t)
	dsn, _ := stacktest.Migrated(t)
	col := otlptest.New(t)
	// The process's environment, not only run's getenv: the OTLP exporter and the batch
	// processor read their variables themselves (tracing.Setup).
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
	pub, adm := stacktest.FreeAddr(t), stacktest.FreeAddr(t)
	getenv := stacktest.Getenv(map[string]string{
		"SECKILL_MYSQL_DSN":    dsn,
		"SECKILL_GATEWAY_ADDR": pub, "SECKILL_ADMIN_ADDR": adm,
		"SECKILL_ADMIN_TOKEN": testAdminToken,
		"SECKILL_JWT_SECRET":  "test-jwt-secret-0123456789-0123456789",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, &out) }()
	exitedEarly(t, done, &out)
	stacktest.WaitHTTP(t, "http://"+pub+"/healthz", 20*time.Second)
	stacktest.WaitHTTP(t, "http://"+adm+"/healthz", 20*time.Second)

	if a := call(t, "GET", "http://"+pub+"/api/v1/grabs/1-1-abcdefgh", ""); a.code != http.StatusUnauthorized {
		t.Fatalf("status poll without a token: %d", a.code)
	}
	scrape := func(accept string) (string, string) {
		req, _ := http.NewRequest("GET", "http://"+adm+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(b)
	}
	ct, text := scrape("")
	if !strings.HasPrefix(ct, "text/plain") || strings.Contains(text, "# {trace_id=") {
		t.Fatalf("a plain scrape got %s with exemplars: the text format must stay for scrapers that do not ask", ct)
	}
	ct, om := scrape("application/openmetrics-text;version=1.0.0")
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("an OpenMetrics scrape got %s", ct)
	}
	if !strings.Contains(om, `seckill_gateway_request_duration_seconds_bucket{route="status"`) || !strings.Contains(om, `# {trace_id="`) {
		t.Fatalf("no exemplar with a trace id on the status latency:\n%s", grepLines(om, "request_duration"))
	}
	if got := col.Spans(); len(got) != 0 {
		t.Fatalf("%d spans exported before shutdown: the batch delay did not hold", len(got))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v; log:\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop within 20s")
	}
	if !strings.Contains(out.String(), `"tracing_sampler":"always_on"`) {
		t.Errorf("the start-up line does not name the sampler:\n%s", out.String())
	}
	if len(col.Named("GET /api/v1/grabs/{request_id}")) != 1 {
		t.Errorf("no span of the status poll flushed at shutdown (%d spans exported)", len(col.Spans()))
	}
	for _, s := range col.Spans() {
		for _, a := range s.GetAttributes() {
			if v := a.GetValue().GetStringValue(); v == "/metrics" || v == "/healthz" {
				t.Errorf("%s was traced: span %q", v, s.GetName())
			}
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
