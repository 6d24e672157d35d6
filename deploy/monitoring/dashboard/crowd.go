package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-pipeline/seckill/internal/adminclient"
	"github.com/seckill-pipeline/seckill/pkg/auth"
)

// crowd is the load -check -crowd drives through the running services, so every panel
// has something to show: a sale of its own (created and preheated through the admin API),
// then distinct users grabbing at a steady rate through the public address, each admitted
// grab polled once, and one user in ten grabbing twice (the per-user limit answers).
type crowd struct {
	public string
	admin  *adminclient.Client
	signer *auth.Signer
	http   *http.Client
	rate   int

	sent, failed atomic.Int64
	mu           sync.Mutex
	codes        map[int]int
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// newCrowd reads the addresses and secrets the services of make run use: SECKILL_GATEWAY_ADDR
// (the public address; HAProxy's on the cluster profile), SECKILL_ADMIN_ADDR, and
// SECKILL_ADMIN_TOKEN and SECKILL_JWT_SECRET (.state/dev-secrets).
func newCrowd(public, admin string, rate int) (*crowd, error) {
	secret, token := os.Getenv("SECKILL_JWT_SECRET"), os.Getenv("SECKILL_ADMIN_TOKEN")
	if secret == "" || token == "" {
		return nil, errors.New("-crowd needs SECKILL_JWT_SECRET and SECKILL_ADMIN_TOKEN (load .state/dev-secrets)")
	}
	if rate < 1 {
		return nil, fmt.Errorf("-rate %d: want at least 1", rate)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	return &crowd{public: "http://" + public, admin: &adminclient.Client{Base: "http://" + admin, Token: token, HTTP: hc},
		signer: auth.NewSigner([]byte(secret), env("SECKILL_JWT_ISSUER", "seckill"), env("SECKILL_JWT_AUDIENCE", "seckill-gateway")),
		http:   hc, rate: rate, codes: map[int]int{}}, nil
}

// sale creates an activity whose one session opens in a few seconds and lasts 20 minutes,
// with a small prize (sells out during the crowd) and a large one, preheats it and waits
// until it is open.
func (c *crowd) sale(ctx context.Context) (session int64, prizes []int64, err error) {
	start := time.Now().Add(3 * time.Second).UTC().Truncate(time.Second)
	s, err := c.admin.CreateSale(ctx, "dashboard check crowd", start, 20*time.Minute,
		[]adminclient.Prize{{Name: "scarce", Stock: 200}, {Name: "plenty", Stock: 1_000_000}})
	if err != nil {
		return 0, nil, err
	}
	fmt.Printf("crowd: activity %d, session %d, prizes %v, opens %s\n", s.Activity, s.Session, s.Prizes, start.Format(time.RFC3339))
	select {
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-time.After(time.Until(start) + 500*time.Millisecond):
	}
	return s.Session, s.Prizes, nil
}

// run grabs at c.rate a second until ctx ends; it returns once every request it started has
// ended.
func (c *crowd) run(ctx context.Context, session int64, prizes []int64) {
	var wg sync.WaitGroup
	t := time.NewTicker(time.Second / time.Duration(c.rate))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			user := fmt.Sprintf("dashcheck-%d-%d", session, i)
			c.user(ctx, user, session, prizes[i%len(prizes)], i%10 == 0)
		}(i)
	}
}

// user grabs once (twice when again), and polls an admitted grab's status once.
func (c *crowd) user(ctx context.Context, user string, session, prize int64, again bool) {
	tok, err := c.signer.Token(user, time.Now(), time.Hour)
	if err != nil {
		c.failed.Add(1)
		return
	}
	url := fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/grab", c.public, session, prize)
	var v struct {
		RequestID string `json:"request_id"`
	}
	code, err := c.do(ctx, http.MethodPost, url, "Bearer "+tok, &v)
	if err != nil {
		return
	}
	if again {
		_, _ = c.do(ctx, http.MethodPost, url, "Bearer "+tok, nil)
	}
	if code == http.StatusAccepted && v.RequestID != "" {
		_, _ = c.do(ctx, http.MethodGet, c.public+"/api/v1/grabs/"+v.RequestID, "Bearer "+tok, nil)
	}
}

// do sends one public API request and counts its answer.
func (c *crowd) do(ctx context.Context, method, url, authz string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", authz)
	c.sent.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.failed.Add(1)
		}
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.mu.Lock()
	c.codes[resp.StatusCode]++
	c.mu.Unlock()
	if out != nil && resp.StatusCode/100 == 2 {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

func (c *crowd) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d requests sent, answers by status %v, %d without an answer", c.sent.Load(), c.codes, c.failed.Load())
}
