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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-pipeline/seckill/internal/load"
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
	sum := load.Run(ctx, load.Options{Requests: o.requests, Concurrency: o.concurrency, Rate: o.rate,
		MaxDuration: o.maxDuration, Progress: stderr}, func(ctx context.Context, i int) (int, error) {
		prize := o.prizes[i%len(o.prizes)]
		req, err := http.NewRequestWithContext(ctx, "POST",
			fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", o.target, o.session, prize), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+tokens[i%o.users])
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%08d", o.keyPrefix, i))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	})
	if o.asJSON {
		return json.NewEncoder(stdout).Encode(sum)
	}
	fmt.Fprintln(stdout, sum)
	return nil
}
