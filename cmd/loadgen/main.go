// Command loadgen fires grab requests at a gateway on loopback and prints throughput and
// latency. Closed loop (-rate 0): -concurrency workers send back to back. Open loop
// (-rate R): requests start at R per second whatever the answers, so latency is measured at
// a given load. Bounded by -requests and -max-duration; valid JWTs for -users users.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/auth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type options struct {
	target      string
	session     int64
	prizes      []int64
	users       int
	requests    int
	concurrency int
	rate        float64
	maxDuration time.Duration
	keyPrefix   string
	asJSON      bool
	secret      string
	issuer      string
	audience    string
}

func parse(args []string, getenv func(string) string) (options, error) {
	var o options
	var prizes string
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&o.target, "target", "http://127.0.0.1:8080", "gateway base URL (loopback only)")
	fs.Int64Var(&o.session, "session", 0, "session id (required)")
	fs.StringVar(&prizes, "prizes", "", "comma-separated prize ids, picked round-robin (required)")
	fs.IntVar(&o.users, "users", 1000, "distinct users (each gets a signed token)")
	fs.IntVar(&o.requests, "requests", 10000, "requests to send in total")
	fs.IntVar(&o.concurrency, "concurrency", 64, "workers (closed loop) or max in flight (open loop)")
	fs.Float64Var(&o.rate, "rate", 0, "requests per second (open loop); 0 = closed loop")
	fs.DurationVar(&o.maxDuration, "max-duration", 2*time.Minute, "stop after this long whatever is left")
	fs.StringVar(&o.keyPrefix, "key-prefix", strconv.FormatInt(time.Now().UnixNano(), 36), "Idempotency-Key prefix (unique per run)")
	fs.BoolVar(&o.asJSON, "json", false, "print the summary as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.secret = getenv("SECKILL_JWT_SECRET")
	o.issuer = or(getenv("SECKILL_JWT_ISSUER"), "seckill")
	o.audience = or(getenv("SECKILL_JWT_AUDIENCE"), "seckill-gateway")
	for _, p := range strings.Split(prizes, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		id, err := strconv.ParseInt(p, 10, 64)
		if err != nil || id <= 0 {
			return o, fmt.Errorf("-prizes: %q is not a prize id", p)
		}
		o.prizes = append(o.prizes, id)
	}
	u, err := url.Parse(o.target)
	switch {
	case err != nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" && u.Hostname() != "::1"):
		return o, errors.New("-target must be a loopback URL")
	case o.session <= 0 || len(o.prizes) == 0:
		return o, errors.New("-session and -prizes are required")
	case o.users < 1 || o.requests < 1 || o.concurrency < 1 || o.rate < 0:
		return o, errors.New("-users, -requests and -concurrency must be ≥ 1, -rate ≥ 0")
	case len(o.secret) < 32:
		return o, errors.New("SECKILL_JWT_SECRET (≥ 32 bytes, the gateway's) is required to sign user tokens")
	}
	return o, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Result is one request's outcome.
type Result struct {
	Status  int
	Latency time.Duration
	Err     bool
}

// Summary is what a run measured.
type Summary struct {
	Mode         string         `json:"mode"`
	Requests     int            `json:"requests"`
	Errors       int            `json:"errors"`
	Seconds      float64        `json:"seconds"`
	ThroughputPS float64        `json:"throughput_per_s"`
	P50ms        float64        `json:"p50_ms"`
	P90ms        float64        `json:"p90_ms"`
	P99ms        float64        `json:"p99_ms"`
	P999ms       float64        `json:"p999_ms"`
	MaxMs        float64        `json:"max_ms"`
	Codes        map[string]int `json:"codes"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parse(args, getenv)
	if err != nil {
		return err
	}
	signer := auth.NewSigner([]byte(o.secret), o.issuer, o.audience)
	tokens := make([]string, o.users)
	for i := range tokens {
		// Users are named after the run's key prefix, so runs do not inherit each other's
		// per-user counts.
		if tokens[i], err = signer.Token(fmt.Sprintf("%s-u%d", o.keyPrefix, i), time.Now(), 2*time.Hour); err != nil {
			return err
		}
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: o.concurrency * 2, MaxIdleConnsPerHost: o.concurrency * 2, IdleConnTimeout: time.Minute},
	}
	ctx, cancel := context.WithTimeout(ctx, o.maxDuration)
	defer cancel()

	results := make([]Result, o.requests)
	var next, done atomic.Int64
	fire := func(i int) {
		prize := o.prizes[i%len(o.prizes)]
		req, _ := http.NewRequestWithContext(ctx, "POST",
			fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", o.target, o.session, prize), nil)
		req.Header.Set("Authorization", "Bearer "+tokens[i%o.users])
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%08d", o.keyPrefix, i))
		start := time.Now()
		resp, err := client.Do(req)
		r := Result{Latency: time.Since(start)}
		if err != nil {
			r.Err = true
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.Status = resp.StatusCode
		}
		results[i] = r
		done.Add(1)
	}

	stopProgress := progress(stderr, &done, o.requests)
	start := time.Now()
	var wg sync.WaitGroup
	mode := "closed"
	if o.rate == 0 {
		for range o.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					i := int(next.Add(1) - 1)
					if i >= o.requests {
						return
					}
					fire(i)
				}
			}()
		}
	} else {
		mode = "open"
		sem := make(chan struct{}, o.concurrency)
		// Request i is due at start + i/rate. Sleeping until each due time (and firing at
		// once when behind) keeps the offered rate exact even when a ticker could not fire
		// that often on a loaded box.
		interval := time.Duration(float64(time.Second) / o.rate)
	loop:
		for i := 0; i < o.requests; i++ {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				select {
				case <-ctx.Done():
					break loop
				case <-time.After(wait):
				}
			} else if ctx.Err() != nil {
				break loop
			}
			select {
			case sem <- struct{}{}:
			default:
				results[i] = Result{Err: true} // the generator itself saturated: count it, never wait
				done.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				fire(i)
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	sum := summarize(mode, results[:done.Load()], elapsed)
	if o.asJSON {
		return json.NewEncoder(stdout).Encode(sum)
	}
	fmt.Fprintf(stdout, "%s loop: %d requests in %.2fs = %.0f/s; latency p50 %.2fms p90 %.2fms p99 %.2fms p99.9 %.2fms max %.2fms; errors %d; codes %v\n",
		sum.Mode, sum.Requests, sum.Seconds, sum.ThroughputPS, sum.P50ms, sum.P90ms, sum.P99ms, sum.P999ms, sum.MaxMs, sum.Errors, sum.Codes)
	return nil
}

func summarize(mode string, rs []Result, elapsed time.Duration) Summary {
	s := Summary{Mode: mode, Requests: len(rs), Seconds: elapsed.Seconds(), Codes: map[string]int{}}
	lat := make([]float64, 0, len(rs))
	for _, r := range rs {
		if r.Err {
			s.Errors++
			continue
		}
		s.Codes[strconv.Itoa(r.Status)]++
		lat = append(lat, float64(r.Latency.Microseconds())/1000)
	}
	if elapsed > 0 {
		s.ThroughputPS = float64(len(lat)) / elapsed.Seconds()
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	s.P50ms, s.P90ms, s.P99ms, s.P999ms = pct(.5), pct(.9), pct(.99), pct(.999)
	if len(lat) > 0 {
		s.MaxMs = lat[len(lat)-1]
	}
	return s
}

// progress draws a bar on stderr when it is a terminal; it returns a function that stops it.
func progress(w io.Writer, done *atomic.Int64, total int) func() {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			n := int(done.Load())
			bar := strings.Repeat("#", n*30/total) + strings.Repeat(".", 30-n*30/total)
			fmt.Fprintf(f, "\r[%s] %d/%d", bar, n, total)
			select {
			case <-stop:
				fmt.Fprintln(f)
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop); <-finished }
}
