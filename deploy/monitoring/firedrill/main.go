// Command firedrill makes a real alert fire: it drives the services of `make run` into a
// fault and waits until the local Prometheus (make monitor) reports the alert as firing in
// /api/v1/alerts, then prints it. It exits non-zero when the alert has not fired in time.
//
//	go run ./deploy/monitoring/firedrill -scenario conflicts   (SeckillConflictRateHigh)
//	go run ./deploy/monitoring/firedrill -scenario soldout     (SeckillSoldOutAfterAdmission)
//
// conflicts: a sale with a steady crowd while another MySQL writer bumps the stock row's
// version, the way the chaos suite's conflict storm does: the consumers' optimistic lock
// conflicts, retries and compensates. soldout: Redis is given more stock than MySQL (drift
// injected into the admission gate's key), so MySQL rejects the excess sold_out.
//
// It creates its own activity through the admin API (SECKILL_ADMIN_TOKEN), signs user tokens
// with SECKILL_JWT_SECRET, and reaches MySQL and Redis through the stack's variables: run it
// with .state/env and .state/dev-secrets loaded (make firedrill does).
package main

import (
	"bytes"
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-pipeline/seckill/internal/adminclient"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "firedrill:", err)
		os.Exit(1)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type drill struct {
	gateway, admin, prom string
	adminToken           string
	signer               *auth.Signer
	http                 *http.Client
}

func run(ctx context.Context) error {
	scenario := flag.String("scenario", "conflicts", "conflicts or soldout")
	prom := flag.String("prometheus", env("SECKILL_PROMETHEUS_URL", "http://127.0.0.1:19090"), "Prometheus base URL")
	timeout := flag.Duration("timeout", 6*time.Minute, "how long to wait for the alert")
	rate := flag.Int("rate", 40, "grabs per second (conflicts)")
	flag.Parse()
	secret, token := os.Getenv("SECKILL_JWT_SECRET"), os.Getenv("SECKILL_ADMIN_TOKEN")
	if secret == "" || token == "" {
		return errors.New("SECKILL_JWT_SECRET and SECKILL_ADMIN_TOKEN must be set (load .state/dev-secrets)")
	}
	d := &drill{
		gateway: "http://" + env("SECKILL_GATEWAY_ADDR", "127.0.0.1:8080"),
		admin:   "http://" + env("SECKILL_ADMIN_ADDR", "127.0.0.1:8081"),
		prom:    *prom, adminToken: token,
		signer: auth.NewSigner([]byte(secret), env("SECKILL_JWT_ISSUER", "seckill"), env("SECKILL_JWT_AUDIENCE", "seckill-gateway")),
		http:   &http.Client{Timeout: 10 * time.Second},
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch *scenario {
	case "conflicts":
		return d.conflicts(ctx, *rate)
	case "soldout":
		return d.soldOut(ctx)
	}
	return fmt.Errorf("unknown scenario %q", *scenario)
}

// sale creates an activity whose one session opens in a few seconds, preheats it and waits
// until it is open; it returns the session and prize ids.
func (d *drill) sale(ctx context.Context, name string, stockN int) (session, prize int64, err error) {
	start := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	s, err := d.adminClient().CreateSale(ctx, name, start, 20*time.Minute, []adminclient.Prize{{Name: "drill prize", Stock: stockN}})
	if err != nil {
		return 0, 0, err
	}
	session, prize = s.Session, s.Prizes[0]
	fmt.Printf("activity %d: session %d, prize %d, stock %d, opens %s\n", s.Activity, session, prize, stockN, start.Format(time.RFC3339))
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(time.Until(start) + 500*time.Millisecond):
	}
	return session, prize, nil
}

func (d *drill) adminClient() *adminclient.Client {
	return &adminclient.Client{Base: d.admin, Token: d.adminToken, HTTP: d.http}
}

// grab sends one grab as user and returns the HTTP status.
func (d *drill) grab(ctx context.Context, session, prize int64, user string) (int, error) {
	tok, err := d.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", d.gateway, session, prize), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (d *drill) conflicts(ctx context.Context, rate int) error {
	db, err := store.Open(ctx, env("SECKILL_MYSQL_DSN", config.DefaultMySQLDSN))
	if err != nil {
		return err
	}
	defer store.Close(db)
	session, prize, err := d.sale(ctx, "firedrill: conflict storm", 1_000_000)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var bumps, sent atomic.Int64
	codes := sync.Map{}
	wg.Add(2)
	go func() { // the other writer: every stock row version of this session, continuously
		defer wg.Done()
		for ctx.Err() == nil {
			if db.WithContext(ctx).Exec("UPDATE session_stocks SET version = version + 1 WHERE session_id = ?", session).Error == nil {
				bumps.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() { // the crowd: rate distinct users a second
		defer wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			go func(i int) {
				code, err := d.grab(ctx, session, prize, fmt.Sprintf("drill-%d-%d", session, i))
				if err == nil {
					n, _ := codes.LoadOrStore(code, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
				sent.Add(1)
			}(i)
		}
	}()
	defer func() {
		stop()
		wg.Wait()
		summary := map[int]int64{}
		codes.Range(func(k, v any) bool { summary[k.(int)] = v.(*atomic.Int64).Load(); return true })
		fmt.Printf("sent %d grabs (answers %v), %d version bumps\n", sent.Load(), summary, bumps.Load())
	}()
	return d.waitFiring(ctx, "SeckillConflictRateHigh", "seckill:consumer_conflict_rate:ratio_rate1m")
}

func (d *drill) soldOut(ctx context.Context) error {
	rdb, err := stock.Connect(ctx, env("SECKILL_REDIS_ADDR", config.DefaultRedisAddr), os.Getenv("SECKILL_REDIS_PASSWORD"), time.Second)
	if err != nil {
		return err
	}
	defer rdb.Close()
	const stockN, extra = 10, 15
	session, prize, err := d.sale(ctx, "firedrill: Redis ahead of MySQL", stockN)
	if err != nil {
		return err
	}
	// Drift: Redis believes there are 15 more units than MySQL has.
	if err := rdb.HIncrBy(ctx, stock.KeysFor(session, prize).Meta, "left", extra).Err(); err != nil {
		return err
	}
	answers := map[int]int{}
	for i := range stockN + extra {
		code, err := d.grab(ctx, session, prize, fmt.Sprintf("drill-%d-%d", session, i))
		if err != nil {
			return err
		}
		answers[code]++
	}
	fmt.Printf("Redis left raised by %d; %d grabs answered %v\n", extra, stockN+extra, answers)
	return d.waitFiring(ctx, "SeckillSoldOutAfterAdmission", `sum(increase(seckill_consumer_orders_total{status="rejected", reason="sold_out"}[5m]))`)
}

// waitFiring polls Prometheus until alert is firing, printing expr's value meanwhile.
func (d *drill) waitFiring(ctx context.Context, alert, expr string) error {
	fmt.Printf("waiting for %s to fire (Prometheus %s)\n", alert, d.prom)
	t0 := time.Now()
	for {
		state, body, err := d.alertState(ctx, alert)
		if err != nil && ctx.Err() == nil {
			fmt.Println("  alerts unreadable:", err)
		}
		v, _ := d.value(ctx, expr)
		fmt.Printf("  %4.0fs  %s = %s  %s: %s\n", time.Since(t0).Seconds(), expr, v, alert, orInactive(state))
		if state == "firing" {
			fmt.Printf("\nGET %s/api/v1/alerts (%s):\n%s\n", d.prom, alert, body)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not fire within the timeout", alert)
		case <-time.After(5 * time.Second):
		}
	}
}

func orInactive(s string) string {
	if s == "" {
		return "inactive"
	}
	return s
}

func (d *drill) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.prom+path, nil)
	if err != nil {
		return err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// alertState returns the alert's state in /api/v1/alerts and its entry as indented JSON.
func (d *drill) alertState(ctx context.Context, alert string) (string, string, error) {
	var body struct {
		Data struct {
			Alerts []map[string]any `json:"alerts"`
		} `json:"data"`
	}
	if err := d.get(ctx, "/api/v1/alerts", &body); err != nil {
		return "", "", err
	}
	for _, a := range body.Data.Alerts {
		if labels, _ := a["labels"].(map[string]any); labels["alertname"] == alert {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			_ = enc.Encode(a)
			state, _ := a["state"].(string)
			return state, strings.TrimSpace(b.String()), nil
		}
	}
	return "", "", nil
}

func (d *drill) value(ctx context.Context, expr string) (string, error) {
	var body struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := d.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &body); err != nil {
		return "", err
	}
	if len(body.Data.Result) == 0 || len(body.Data.Result[0].Value) < 2 {
		return "none", nil
	}
	return fmt.Sprint(body.Data.Result[0].Value[1]), nil
}
