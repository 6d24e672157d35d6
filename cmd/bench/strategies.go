package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/load"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The classic strategies the pipeline is compared with. They live here, in the benchmark,
// not in the product: same net/http server settings and the same JWT check as the gateway,
// one hot item, and each keeps its own count of winners so oversell is measured, not assumed.

// strategyServer serves /trivial, /jwt, /lock, /optimistic and /pessimistic.
type strategyServer struct {
	rdb      redis.UniversalClient
	db       *gorm.DB
	verifier *auth.Verifier

	conflicts atomic.Int64 // optimistic: conditional updates that matched no row
	attempts  atomic.Int64 // optimistic: transactions tried
	gaveUp    atomic.Int64 // optimistic: requests that ended on a conflict
	lockWaits atomic.Int64 // lock: acquisitions that had to wait
	// failures counts answers that are the server failing (a 503), not the strategy
	// deciding: a run with any is not a measurement of the strategy and fails the bench.
	failures atomic.Int64
	lastErr  atomic.Value // string
}

// fail answers 503 for a server-side error and remembers it for the stats. A request whose
// client went away (the run's window ended with it in flight) is not the server failing.
func (s *strategyServer) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		s.failures.Add(1)
		s.lastErr.Store(err.Error())
	}
	answer(w, http.StatusServiceUnavailable)
}

const (
	lockStockKey = "bench:{lock}:stock"
	lockSoldKey  = "bench:{lock}:sold"
	lockKey      = "bench:{lock}:mutex"
)

// unlock deletes the lock only if it still holds our token (compare-and-delete).
var unlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// serveStrategies serves the strategy server. Without a database (dsn "") it serves only
// the ceilings: /trivial, /jwt and, with a key set file (jwks), /jwt-es256.
func serveStrategies(ctx context.Context, addr, dsn, redisAddr, secret, jwks string) error {
	verifier, err := auth.NewVerifier([]byte(secret), "seckill", "seckill-gateway", time.Now)
	if err != nil {
		return err
	}
	s := &strategyServer{verifier: verifier}
	var keySet *auth.Verifier
	if jwks != "" {
		doc, err := os.ReadFile(jwks)
		if err != nil {
			return err
		}
		ks, err := auth.ParseKeySet(doc)
		if err != nil {
			return err
		}
		if keySet, err = auth.NewKeySetVerifier(ks, "seckill", "seckill-gateway", time.Now); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	trivial := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"queued"}` + "\n"))
	}
	mux.HandleFunc("POST /trivial", trivial)
	// The same HS256 check as the gateway (issuer, audience, expiry), then the trivial answer.
	mux.HandleFunc("POST /jwt", s.authed(func(w http.ResponseWriter, r *http.Request, _ string) { trivial(w, r) }))
	// The production path's check instead: ES256 against the identity provider's key set.
	if keySet != nil {
		mux.HandleFunc("POST /jwt-es256", authedBy(keySet, func(w http.ResponseWriter, r *http.Request, _ string) { trivial(w, r) }))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	if dsn != "" {
		if err := s.open(ctx, dsn, redisAddr); err != nil {
			return err
		}
		mux.HandleFunc("POST /lock", s.authed(s.lock))
		mux.HandleFunc("POST /optimistic", s.authed(s.optimistic))
		mux.HandleFunc("POST /pessimistic", s.authed(s.pessimistic))
		mux.HandleFunc("POST /reset", s.reset)
		mux.HandleFunc("GET /stats", s.stats)
	}
	return ops.Serve(ctx, ops.NewServer(addr, mux), 5*time.Second)
}

func (s *strategyServer) open(ctx context.Context, dsn, redisAddr string) error {
	var err error
	if s.rdb, err = stock.Connect(ctx, redisAddr, "", time.Second); err != nil {
		return err
	}
	if s.db, err = store.Open(ctx, dsn); err != nil {
		return err
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	// A stock MariaDB allows 151 connections, and the pipeline's gateway and consumers hold
	// some: a bigger pool turns the DB strategies into "too many connections" errors.
	sqlDB.SetMaxOpenConns(64)
	sqlDB.SetMaxIdleConns(64)
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS bench_stock (id INT PRIMARY KEY, left_stock INT NOT NULL, version BIGINT NOT NULL,
			CONSTRAINT ck_bench_left CHECK (left_stock >= 0)) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS bench_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, strategy VARCHAR(16) NOT NULL,
			user_id VARCHAR(64) NOT NULL, KEY (strategy)) ENGINE=InnoDB`,
	} {
		if err := s.db.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

func (s *strategyServer) authed(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return authedBy(s.verifier, h)
}

// authedBy calls h with the user of the request's bearer token as v verifies it, or answers 401.
func authedBy(v *auth.Verifier, h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		user, err := v.User(tok)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h(w, r, user)
	}
}

func answer(w http.ResponseWriter, code int) {
	w.WriteHeader(code)
}

// (b) a Redis lock around read-check-decrement: SET NX PX with a random token, then the
// compare-and-delete unlock. Waiters spin with a short sleep, for at most 2 s.
func (s *strategyServer) lock(w http.ResponseWriter, r *http.Request, user string) {
	ctx := r.Context()
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	token := hex.EncodeToString(b)
	deadline := time.Now().Add(2 * time.Second)
	waited := false
	for {
		ok, err := s.rdb.SetNX(ctx, lockKey, token, 500*time.Millisecond).Result()
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if ok {
			break
		}
		if !waited {
			s.lockWaits.Add(1)
			waited = true
		}
		if time.Now().After(deadline) {
			answer(w, http.StatusTooManyRequests) // gave up waiting for the lock: contention
			return
		}
		time.Sleep(time.Millisecond)
	}
	defer unlock.Run(context.WithoutCancel(ctx), s.rdb, []string{lockKey}, token)
	left, err := s.rdb.Get(ctx, lockStockKey).Int64()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if left <= 0 {
		answer(w, http.StatusConflict)
		return
	}
	pipe := s.rdb.TxPipeline()
	pipe.Decr(ctx, lockStockKey)
	pipe.SAdd(ctx, lockSoldKey, user)
	if _, err := pipe.Exec(ctx); err != nil {
		s.fail(w, r, err)
		return
	}
	answer(w, http.StatusOK)
}

var errConflict = errors.New("conflict")

// (c) optimistic locking per request in the database: read the version, conditional
// UPDATE, INSERT the order, each attempt a fresh transaction. ?retries=0 tries once;
// otherwise the tiered policy: 3 immediate retries, then 6 with jittered backoff.
func (s *strategyServer) optimistic(w http.ResponseWriter, r *http.Request, user string) {
	ctx := r.Context()
	maxRetries := 9
	if v := r.URL.Query().Get("retries"); v != "" {
		maxRetries, _ = strconv.Atoi(v)
	}
	for attempt := 0; ; attempt++ {
		s.attempts.Add(1)
		sold := false
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var row struct {
				LeftStock int
				Version   int64
			}
			if err := tx.Raw("SELECT left_stock, version FROM bench_stock WHERE id = 1").Scan(&row).Error; err != nil {
				return err
			}
			if row.LeftStock <= 0 {
				sold = true
				return nil
			}
			res := tx.Exec("UPDATE bench_stock SET left_stock = left_stock - 1, version = version + 1 WHERE id = 1 AND version = ?", row.Version)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != 1 {
				return errConflict
			}
			return tx.Exec("INSERT INTO bench_orders (strategy, user_id) VALUES ('optimistic', ?)", user).Error
		})
		switch {
		case err == nil && sold:
			answer(w, http.StatusConflict)
			return
		case err == nil:
			answer(w, http.StatusOK)
			return
		case !errors.Is(err, errConflict) && !store.IsTransient(err):
			s.fail(w, r, err)
			return
		}
		s.conflicts.Add(1)
		if attempt >= maxRetries {
			s.gaveUp.Add(1)
			answer(w, http.StatusTooManyRequests) // gave up on contention
			return
		}
		if attempt >= 3 {
			d := time.Duration(1<<min(attempt-3, 5)) * time.Millisecond
			time.Sleep(d/2 + rand.N(d/2+1))
		}
	}
}

// (d) pessimistic locking: SELECT … FOR UPDATE serialises every request on the row.
func (s *strategyServer) pessimistic(w http.ResponseWriter, r *http.Request, user string) {
	sold := false
	err := s.db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
		var left int
		if err := tx.Raw("SELECT left_stock FROM bench_stock WHERE id = 2 FOR UPDATE").Scan(&left).Error; err != nil {
			return err
		}
		if left <= 0 {
			sold = true
			return nil
		}
		if err := tx.Exec("UPDATE bench_stock SET left_stock = left_stock - 1 WHERE id = 2").Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO bench_orders (strategy, user_id) VALUES ('pessimistic', ?)", user).Error
	})
	switch {
	case err != nil:
		s.fail(w, r, err)
	case sold:
		answer(w, http.StatusConflict)
	default:
		answer(w, http.StatusOK)
	}
}

func (s *strategyServer) reset(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("stock"))
	if err != nil || n < 0 {
		http.Error(w, "stock", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	errs := []error{
		s.rdb.Set(ctx, lockStockKey, n, time.Hour).Err(),
		s.rdb.Del(ctx, lockSoldKey, lockKey).Err(),
		s.db.Exec("DELETE FROM bench_orders").Error,
		s.db.Exec("REPLACE INTO bench_stock (id, left_stock, version) VALUES (1, ?, 0), (2, ?, 0)", n, n).Error,
	}
	if err := errors.Join(errs...); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.conflicts.Store(0)
	s.attempts.Store(0)
	s.gaveUp.Store(0)
	s.lockWaits.Store(0)
	s.failures.Store(0)
	w.WriteHeader(http.StatusOK)
}

type strategyStats struct {
	LockSold        int64  `json:"lock_sold"`
	LockLeft        int64  `json:"lock_left"`
	OptimisticSold  int64  `json:"optimistic_sold"`
	PessimisticSold int64  `json:"pessimistic_sold"`
	Attempts        int64  `json:"optimistic_attempts"`
	Conflicts       int64  `json:"optimistic_conflicts"`
	GaveUp          int64  `json:"optimistic_gave_up"`
	LockWaits       int64  `json:"lock_waits"`
	Failures        int64  `json:"failures"`
	LastError       string `json:"last_error"`
}

func (s *strategyServer) stats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var st strategyStats
	// A failed count must fail the run, never read as "sold 0" (and so "oversold 0").
	if err := s.db.Raw("SELECT COUNT(*) FROM bench_orders WHERE strategy = 'optimistic'").Scan(&st.OptimisticSold).Error; err != nil {
		http.Error(w, "count optimistic orders: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if err := s.db.Raw("SELECT COUNT(*) FROM bench_orders WHERE strategy = 'pessimistic'").Scan(&st.PessimisticSold).Error; err != nil {
		http.Error(w, "count pessimistic orders: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var err error
	if st.LockSold, err = s.rdb.SCard(ctx, lockSoldKey).Result(); err != nil {
		http.Error(w, "count lock strategy sales: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if st.LockLeft, err = s.rdb.Get(ctx, lockStockKey).Int64(); err != nil {
		http.Error(w, "read lock strategy stock: "+err.Error(), http.StatusInternalServerError)
		return
	}
	st.Attempts, st.Conflicts, st.GaveUp, st.LockWaits = s.attempts.Load(), s.conflicts.Load(), s.gaveUp.Load(), s.lockWaits.Load()
	st.Failures = s.failures.Load()
	st.LastError, _ = s.lastErr.Load().(string)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// valid fails a strategy run in which the server itself failed: its throughput would be
// that of fast error answers, and every ratio against it a comparison with a broken server.
func (st strategyStats) valid(path string) error {
	if st.Failures > 0 {
		return fmt.Errorf("strategy %s: the server failed %d requests (last: %s); not a measurement of the strategy", path, st.Failures, st.LastError)
	}
	return nil
}

func fetchStats(ctx context.Context, base string) (strategyStats, error) {
	var st strategyStats
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return st, fmt.Errorf("strategy stats: %s: %s", resp.Status, body)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func resetStrategies(ctx context.Context, base string, stock int) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/reset?stock=%d", base, stock), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset: %s", resp.Status)
	}
	return nil
}

// Which strategy serves one hot item fastest without overselling? The pipeline (a) and the
// three classic schemes (b, c, d) on the same stock, the same crowd and the same HTTP front;
// then (c) at 1,000 clients with and without retries. Oversold is counted from each
// scheme's own record of winners (MySQL for the pipeline, after the drain).

// strategyWindow bounds each slow strategy's run: its throughput is what it served in it.
func (b *bench) strategyWindow() time.Duration {
	if b.quick {
		return 5 * time.Second
	}
	return 10 * time.Second
}

func (b *bench) strategies(ctx context.Context, rep int) ([]measured, error) {
	const stockN = 2000
	requests := b.n(20_000)
	c, err := harness.NewPipeline(ctx, harness.Options{Bin: b.bin, Stocks: []int{stockN}, Limit: 1, Consumers: 2,
		GatewayEnv: map[string]string{"SECKILL_RATE_PER_USER": "0", "SECKILL_JWT_SECRET": b.secret}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	srv, base, err := b.startStrategyServer(ctx, c.DSN)
	if err != nil {
		return nil, err
	}
	defer srv.Kill()
	token, err := b.tokens(requests)
	if err != nil {
		return nil, err
	}

	// (a) the pipeline, consumers included: oversold is counted in MySQL after the drain.
	grabURL := fmt.Sprintf("http://%s/api/v1/sessions/%d/prizes/%d/grab", c.GatewayAddr, c.Session.ID, c.Prizes[0].ID)
	pa := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency},
		b.httpGrab(func(int) string { return grabURL }, token, "pipe"))
	if err := c.Drain(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	var sold int64
	if err := c.DB.Raw("SELECT COUNT(*) FROM orders WHERE status = 'succeeded'").Scan(&sold).Error; err != nil {
		return nil, fmt.Errorf("count sold orders (a failed count must not read as 'oversold 0'): %w", err)
	}
	sa := sampleFrom(pa)
	sa.Oversold = max(0, sold-stockN)
	sa.Extra["sold"] = sold
	b.logf("  (a) pipeline: %s; sold %d", pa, sold)
	out := []measured{{keyPipeline, "strategy (a): this pipeline (Lua + Kafka + batched consumer)", sa}}

	for _, s := range []struct {
		key, name, path string
		sold            func(strategyStats) int64
	}{
		{keyLock, "strategy (b): Redis lock (SET NX PX + compare-and-delete) around read-check-decrement", "/lock", func(s strategyStats) int64 { return s.LockSold }},
		{keyOptimistic, "strategy (c): DB optimistic lock per request, tiered retries", "/optimistic", func(s strategyStats) int64 { return s.OptimisticSold }},
		{keyPessimistic, "strategy (d): DB pessimistic SELECT … FOR UPDATE", "/pessimistic", func(s strategyStats) int64 { return s.PessimisticSold }},
	} {
		if err := resetStrategies(ctx, base, stockN); err != nil {
			return nil, err
		}
		r := load.Run(ctx, load.Options{Requests: requests, Concurrency: concurrency, MaxDuration: b.strategyWindow()},
			b.httpGrab(func(int) string { return base + s.path }, token, "strat"))
		st, err := fetchStats(ctx, base)
		if err != nil {
			return nil, err
		}
		if err := st.valid(s.path); err != nil {
			return nil, err
		}
		sc := sampleFrom(r)
		sc.Oversold = max(0, s.sold(st)-stockN)
		sc.Extra["sold"] = s.sold(st)
		if s.path == "/optimistic" {
			sc.Extra["conflict_rate"] = float64(st.Conflicts) / float64(max(1, st.Attempts))
		}
		b.logf("  %s: %s; sold %d", s.path, r, s.sold(st))
		out = append(out, measured{s.key, s.name, sc})
	}

	// (c) at 1,000 concurrent clients, with and without retries.
	for _, retries := range []int{0, 9} {
		if err := resetStrategies(ctx, base, stockN); err != nil {
			return nil, err
		}
		r := load.Run(ctx, load.Options{Requests: requests, Concurrency: 1000, MaxDuration: b.strategyWindow()},
			b.httpGrab(func(int) string { return fmt.Sprintf("%s/optimistic?retries=%d", base, retries) }, token, "occ"))
		st, err := fetchStats(ctx, base)
		if err != nil {
			return nil, err
		}
		if err := st.valid(fmt.Sprintf("/optimistic?retries=%d", retries)); err != nil {
			return nil, err
		}
		key, label := "strategy_c_1000_no_retries", "without retries"
		if retries > 0 {
			key, label = "strategy_c_1000_retries", "with tiered retries"
		}
		sc := sampleFrom(r)
		sc.Oversold = max(0, st.OptimisticSold-stockN)
		sc.Extra["sold"] = st.OptimisticSold
		sc.Extra["attempt_conflict_rate"] = float64(st.Conflicts) / float64(max(1, st.Attempts))
		sc.Extra["requests_failed_on_conflict_rate"] = float64(st.GaveUp) / float64(max(1, r.Requests))
		b.logf("  optimistic, 1000 clients, retries=%d: %s; attempts %d, conflicts %d, gave up %d", retries, r, st.Attempts, st.Conflicts, st.GaveUp)
		out = append(out, measured{key, "strategy (c) at 1,000 clients, " + label, sc})
	}
	return out, nil
}
