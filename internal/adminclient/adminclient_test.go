package adminclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A fake admin API: checks the token and the activity asked for, answers as the gateway does.
func TestCreateSaleCreatesAndPreheats(t *testing.T) {
	var preheated []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/admin/v1/activities":
			var in struct {
				WindowStart, WindowEnd string
				Interval               string `json:"interval"`
				SessionLength          string `json:"session_length"`
				PerUserLimit           int    `json:"per_user_limit"`
				Prizes                 []Prize
			}
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				t.Errorf("body: %v", err)
			}
			if in.Interval != "20m0s" || in.SessionLength != "20m0s" || in.PerUserLimit != 1 || len(in.Prizes) != 2 || in.Prizes[1].Stock != 7 {
				t.Errorf("activity asked for: %+v", in)
			}
			_, _ = w.Write([]byte(`{"id":3,"sessions":[{"id":14}],"prizes":[{"id":6},{"id":7}]}`))
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/preheat"):
			preheated = append(preheated, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	c := &Client{Base: srv.URL, Token: "tok", HTTP: srv.Client()}
	s, err := c.CreateSale(context.Background(), "t", time.Now(), 20*time.Minute, []Prize{{Name: "a", Stock: 1}, {Name: "b", Stock: 7}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Activity != 3 || s.Session != 14 || len(s.Prizes) != 2 || s.Prizes[0] != 6 || s.Prizes[1] != 7 {
		t.Errorf("sale = %+v", s)
	}
	if len(preheated) != 1 || preheated[0] != "/admin/v1/sessions/14/preheat" {
		t.Errorf("preheated %v, want session 14 once", preheated)
	}

	c.Token = "wrong"
	if _, err := c.CreateSale(context.Background(), "t", time.Now(), time.Minute, []Prize{{Name: "a", Stock: 1}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("with a wrong token: err = %v, want the 401", err)
	}
}
