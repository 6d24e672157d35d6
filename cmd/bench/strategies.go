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
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/ops"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The classic strategies the pipeline is compared with. They live here, in the benchmark,
// not in the product: same net/http server settings and the same JWT check as the gateway,
// one hot item, and each keeps its own count of winners so oversell is measured, not assumed.

// strategyServer serves /trivial, /lock, /optimistic and /pessimistic.
type strategyServer struct {
	rdb      redis.UniversalClient
	db       *gorm.DB
	verifier *auth.Verifier

	conflicts atomic.Int64 // optimistic: conditional updates that matched no row
	attempts  atomic.Int64 // optimistic: transactions tried
	gaveUp    atomic.Int64 // optimistic: requests that ended on a conflict
	lockWaits atomic.Int64 // lock: acquisitions that had to wait
}

const (
	lockStockKey = "bench:{lock}:stock"
	lockSoldKey  = "bench:{lock}:sold"
	lockKey      = "bench:{lock}:mutex"
)

// unlock deletes the lock only if it still holds our token (compare-and-delete).
var unlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func serveStrategies(ctx context.Context, addr, dsn, redisAddr, secret string) error {
	rdb, err := stock.Connect(ctx, redisAddr, "", time.Second)
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, dsn)
	if err != nil {
		return err
	}
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(256)
	sqlDB.SetMaxIdleConns(256)
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS bench_stock (id INT PRIMARY KEY, left_stock INT NOT NULL, version BIGINT NOT NULL,
			CONSTRAINT ck_bench_left CHECK (left_stock >= 0)) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS bench_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, strategy VARCHAR(16) NOT NULL,
			user_id VARCHAR(64) NOT NULL, KEY (strategy)) ENGINE=InnoDB`,
	} {
		if err := db.Exec(stmt).Error; err != nil {
			return err
		}
	}
	verifier, err := auth.NewVerifier([]byte(secret), "seckill", "seckill-gateway", time.Now)
	if err != nil {
		return err
	}
	s := &strategyServer{rdb: rdb, db: db, verifier: verifier}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /trivial", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"queued"}` + "\n"))
	})
	mux.HandleFunc("POST /lock", s.authed(s.lock))
	mux.HandleFunc("POST /optimistic", s.authed(s.optimistic))
	mux.HandleFunc("POST /pessimistic", s.authed(s.pessimistic))
	mux.HandleFunc("POST /reset", s.reset)
	mux.HandleFunc("GET /stats", s.stats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	return ops.Serve(ctx, ops.NewServer(addr, mux), 5*time.Second)
}

func (s *strategyServer) authed(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		user, err := s.verifier.User(tok)
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
			answer(w, http.StatusServiceUnavailable)
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
			answer(w, http.StatusServiceUnavailable)
			return
		}
		time.Sleep(time.Millisecond)
	}
	defer unlock.Run(context.WithoutCancel(ctx), s.rdb, []string{lockKey}, token)
	left, err := s.rdb.Get(ctx, lockStockKey).Int64()
	if err != nil {
		answer(w, http.StatusServiceUnavailable)
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
		answer(w, http.StatusServiceUnavailable)
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
			answer(w, http.StatusServiceUnavailable)
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
		answer(w, http.StatusServiceUnavailable)
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
	w.WriteHeader(http.StatusOK)
}

type strategyStats struct {
	LockSold        int64 `json:"lock_sold"`
	LockLeft        int64 `json:"lock_left"`
	OptimisticSold  int64 `json:"optimistic_sold"`
	PessimisticSold int64 `json:"pessimistic_sold"`
	Attempts        int64 `json:"optimistic_attempts"`
	Conflicts       int64 `json:"optimistic_conflicts"`
	GaveUp          int64 `json:"optimistic_gave_up"`
	LockWaits       int64 `json:"lock_waits"`
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
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
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
