package harness

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A status poll answered 429 (the user's rate limit) is asked again after Retry-After,
// so a checker reading many of one user's grabs at once never reads "rate limited" as a
// lost 202; a poll refused for ever ends with an error after pollTries.
func TestPollRetriesRateLimitedAnswers(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
		if calls.Add(1) < 3 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"rate_limited"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"succeeded"}`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := Poll(ctx, srv.URL, "tok", "1-2-k")
	if err != nil || st != "succeeded" || calls.Load() != 3 {
		t.Fatalf("poll after two 429s: %q %v (%d calls), want succeeded after 3", st, err, calls.Load())
	}

	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer refused.Close()
	if _, _, err := Poll(ctx, refused.URL, "tok", "1-2-k"); err == nil {
		t.Fatal("a 403 read as a status")
	}
}
