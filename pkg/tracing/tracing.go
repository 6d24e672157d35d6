// Package tracing follows one purchase across the pipeline: it sets OpenTelemetry up from
// the standard OTEL_* environment variables (off unless an OTLP endpoint is configured, and
// then free of cost: no provider, no propagation, no spans), makes a server span of each
// HTTP request (Handler), carries the W3C trace context in Kafka message headers
// (Headers), and puts the trace id on log lines (LogHandler) and on histogram observations
// as Prometheus exemplars (Observe).
//
// Nothing here is global: each service builds one Tracing at start and hands it to what
// makes spans, so a test can run a traced and an untraced component side by side.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultRatio is the share of new traces sampled when OTEL_TRACES_SAMPLER is not set: one
// purchase in a hundred, enough to follow a stuck one on a sale day at a cost the bench
// measures, and a trace an upstream caller sampled is always kept (parent-based).
const DefaultRatio = 0.01

// Tracing is one service's tracer provider and propagator; the zero value and Off() trace
// nothing.
type Tracing struct {
	sdk     *sdktrace.TracerProvider // nil when off
	prop    propagation.TextMapPropagator
	tracer  trace.Tracer // the service's own spans
	sampler string       // what the sampler is, for the start-up log
}

// Off is a Tracing that makes no spans and carries no context.
func Off() *Tracing { return &Tracing{sampler: "off"} }

// Setup builds service's tracing from env (os.Getenv in production). Tracing is on when an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT),
// unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Spans go out over OTLP/HTTP
// (protobuf); the exporter and the batch processor read their own OTEL_EXPORTER_OTLP_* and
// OTEL_BSP_* variables. The sampler is OTEL_TRACES_SAMPLER's (with OTEL_TRACES_SAMPLER_ARG);
// unset, it is parentbased_traceidratio at DefaultRatio. The parent-based samplers also
// sample a root span that links to a sampled span (linked). OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the resource (service by default). A setting this package
// does not support is an error, not a silent default.
func Setup(ctx context.Context, service string, env func(string) string) (*Tracing, error) {
	if v := strings.ToLower(strings.TrimSpace(env("OTEL_SDK_DISABLED"))); v == "true" {
		return Off(), nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(env("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return Off(), nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp (or none) is supported", exp)
	}
	if env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return Off(), nil
	}
	proto := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is supported (the OTLP/HTTP port, 4318 by default)", proto)
	}
	sampler, desc, err := samplerFrom(env)
	if err != nil {
		return nil, err
	}
	endpoint, err := tracesEndpoint(env)
	if err != nil {
		return nil, err
	}
	// The endpoint from env (the exporter would read the process's own environment, and
	// keep its default on a URL it cannot parse, silently); headers, TLS and timeout from
	// OTEL_EXPORTER_OTLP_*.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// resource.Default already read OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; an
	// operator's OTEL_SERVICE_NAME wins over the built-in name.
	if name := env("OTEL_SERVICE_NAME"); name != "" {
		res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
		if err != nil {
			return nil, fmt.Errorf("tracing: resource: %w", err)
		}
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	return &Tracing{sdk: sdk, sampler: desc, tracer: sdk.Tracer("github.com/seckill-pipeline/seckill/" + service),
		prop: propagation.TraceContext{}}, nil
}

// With is a Tracing on a provider the caller built (a test's in-memory exporter, or an
// operator's own set-up), with the W3C propagator; nil is Off.
func With(sdk *sdktrace.TracerProvider, service string) *Tracing {
	if sdk == nil {
		return Off()
	}
	return &Tracing{sdk: sdk, sampler: "caller's", tracer: sdk.Tracer("github.com/seckill-pipeline/seckill/" + service),
		prop: propagation.TraceContext{}}
}

// tracesEndpoint is the URL spans are sent to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is,
// or OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces appended to its path (the specification's
// rule for the base endpoint). Anything but an http or https URL with a host is an error.
func tracesEndpoint(env func(string) string) (string, error) {
	name := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	raw := strings.TrimSpace(env(name))
	base := raw == ""
	if base {
		name = "OTEL_EXPORTER_OTLP_ENDPOINT"
		raw = strings.TrimSpace(env(name))
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%q: want an http:// or https:// URL of an OTLP/HTTP receiver (port 4318 by default)", name, raw)
	}
	if base {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// samplerFrom reads OTEL_TRACES_SAMPLER and its argument (the specification's names).
func samplerFrom(env func(string) string) (sdktrace.Sampler, string, error) {
	name := strings.ToLower(strings.TrimSpace(env("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(env("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func(def float64) (float64, error) {
		if arg == "" {
			return def, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "":
		r, err := ratio(DefaultRatio)
		return linked{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))}, fmt.Sprintf("parentbased_traceidratio %g (default)", r), err
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "traceidratio":
		r, err := ratio(1)
		return sdktrace.TraceIDRatioBased(r), fmt.Sprintf("%s %g", name, r), err
	case "parentbased_always_on":
		return linked{sdktrace.ParentBased(sdktrace.AlwaysSample())}, name, nil
	case "parentbased_always_off":
		return linked{sdktrace.ParentBased(sdktrace.NeverSample())}, name, nil
	case "parentbased_traceidratio":
		r, err := ratio(1)
		return linked{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))}, fmt.Sprintf("%s %g", name, r), err
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// linked extends a parent-based sampler to the spans that have no parent but links: a root
// span linking to a sampled span is sampled. The consumer's batch span is such a root (it
// persists many purchases, each in a trace of its own, and links to them); sampled at the
// ratio alone, the purchase's trace would link to a batch span that was never exported. An
// upstream decision to sample is followed through a link as through a parent.
type linked struct{ base sdktrace.Sampler }

func (l linked) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, ln := range p.Links {
			if ln.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return l.base.ShouldSample(p)
}

func (l linked) Description() string { return "LinkedSampled{" + l.base.Description() + "}" }

// On reports whether spans are made and context carried.
func (t *Tracing) On() bool { return t != nil && t.sdk != nil }

// Sampler says how traces are sampled ("off" when tracing is), for the start-up log.
func (t *Tracing) Sampler() string {
	if !t.On() {
		return "off"
	}
	return t.sampler
}

// Start starts a span of the service's own (trace.Tracer's Start). Off, it returns ctx and a
// span that records nothing, without allocating: the grab path calls it on every request.
func (t *Tracing) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tracer.Start(ctx, name, opts...)
}

// Shutdown flushes the spans still queued and stops the exporter (within ctx).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.On() {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}

// ForService is a service's start of tracing: Setup, one log line saying whether tracing
// is on and how it samples, and the flush to defer right away (so it runs last, after the
// work whose spans it sends): it sends the spans still queued within budget, and logs a
// failure rather than returning it, since the process is ending either way.
func ForService(ctx context.Context, service string, env func(string) string, log *slog.Logger, budget time.Duration) (*Tracing, func(), error) {
	t, err := Setup(ctx, service, env)
	if err != nil {
		return nil, nil, err
	}
	log.Info("tracing", "on", t.On(), "sampler", t.Sampler())
	flush := func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		defer cancel()
		if err := t.Shutdown(fctx); err != nil {
			log.Warn("tracing: spans not flushed", "error", err.Error())
		}
	}
	return t, flush, nil
}
