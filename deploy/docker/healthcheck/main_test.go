package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/down", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	closed := httptest.NewServer(mux)
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name    string
		args    []string
		wantErr string // empty: healthy
	}{
		{"one healthy", []string{srv.URL + "/ok"}, ""},
		{"all healthy", []string{srv.URL + "/ok", srv.URL + "/ok"}, ""},
		{"one of two down", []string{srv.URL + "/ok", srv.URL + "/down"}, "503 Service Unavailable"},
		{"not found", []string{srv.URL + "/nope"}, "404"},
		{"nothing listening", []string{closedURL + "/ok"}, "connect"},
		{"too slow", []string{"-timeout", "200ms", srv.URL + "/slow"}, "deadline exceeded"},
		{"no url", nil, "usage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := run(tc.args, srv.Client())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("run: %v, want healthy", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("run: %v, want an error containing %q", err, tc.wantErr)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("run took %s", time.Since(start))
			}
		})
	}
}
