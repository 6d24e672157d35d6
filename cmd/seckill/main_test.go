package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/draw"
)

// fakeGateway serves one drawn record and each entrant's proof (the bearer token is the
// user id), as a gateway's public API does; tamper changes the record before it is served.
func fakeGateway(t *testing.T, tamper func(*draw.Record)) (*httptest.Server, draw.Record) {
	t.Helper()
	const sid, pid = 7, 12
	src := rand.NewChaCha8([32]byte{7})
	seed, err := draw.NewSeed(src)
	if err != nil {
		t.Fatal(err)
	}
	var entries []draw.Entry
	var users []string
	for i := range 20 {
		salt, err := draw.NewSalt(src)
		if err != nil {
			t.Fatal(err)
		}
		u := fmt.Sprintf("u%d", i)
		entries, users = append(entries, draw.Entry{User: u, Salt: salt}), append(users, u)
	}
	tree, err := draw.Freeze(sid, pid, entries)
	if err != nil {
		t.Fatal(err)
	}
	root := tree.Root()
	ranked := draw.Rank(draw.Key(seed, nil), users)
	rec := draw.Record{SessionID: sid, PrizeID: pid, Phase: draw.PhaseDrawn, Commitment: seed.Commitment(),
		Entries: len(entries), Root: fmt.Sprintf("%x", root[:]), Seed: seed.String(), Values: draw.RankingValues(ranked), Cutoff: 5}
	served := rec
	if tamper != nil {
		tamper(&served)
	}
	places := map[string]draw.Ranked{}
	for _, r := range ranked {
		places[r.User] = r
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/sessions/7/prizes/12/draw":
			_ = json.NewEncoder(w).Encode(served)
		case "/api/v1/sessions/7/prizes/12/draw/proof":
			user := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			p, ok := tree.ProofOf(user)
			if !ok {
				http.Error(w, `{"error":"not_found"}`, http.StatusNotFound)
				return
			}
			me := places[user]
			p.Value, p.Place = fmt.Sprintf("%x", me.Value[:]), me.Place
			_ = json.NewEncoder(w).Encode(p)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

func verify(t *testing.T, srv *httptest.Server, token string, extra ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	args := append([]string{"verify-draw", "-gateway", srv.URL, "-session", "7", "-prize", "12"}, extra...)
	err := run(context.Background(), args, func(k string) string {
		if k == "SECKILL_USER_TOKEN" {
			return token
		}
		return ""
	}, &out, &out)
	return out.String(), err
}

func TestVerifyDrawSaysEachEntrantsPlace(t *testing.T) {
	srv, rec := fakeGateway(t, nil)
	won, waiting := 0, 0
	for i := range 20 {
		out, err := verify(t, srv, fmt.Sprintf("u%d", i), "-commitment", rec.Commitment, "-root", rec.Root)
		if err != nil {
			t.Fatalf("u%d: %v\n%s", i, err, out)
		}
		switch {
		case strings.Contains(out, ": won"):
			won++
		case strings.Contains(out, ": waitlisted"):
			waiting++
		default:
			t.Fatalf("u%d: no standing in %q", i, out)
		}
	}
	if won != 5 || waiting != 15 {
		t.Errorf("%d won and %d waitlisted, want 5 and 15 (cutoff 5 of 20)", won, waiting)
	}
}

func TestVerifyDrawRefuses(t *testing.T) {
	srv, _ := fakeGateway(t, nil)
	for name, c := range map[string]struct {
		srv   *httptest.Server
		token string
		extra []string
		want  string
	}{
		"no token":                     {srv, "", nil, "SECKILL_USER_TOKEN"},
		"not an entrant":               {srv, "nobody", nil, "404"},
		"another commitment than seen": {srv, "u1", []string{"-commitment", strings.Repeat("ab", 32)}, "NOT VERIFIED"},
		"another root than seen":       {srv, "u1", []string{"-root", strings.Repeat("cd", 32)}, "NOT VERIFIED"},
		"a changed seed": {func() *httptest.Server {
			s, _ := fakeGateway(t, func(r *draw.Record) { r.Seed = strings.Repeat("0", 64) })
			return s
		}(), "u1", nil, "seed does not match"},
		"an entry dropped": {func() *httptest.Server {
			s, _ := fakeGateway(t, func(r *draw.Record) { r.Entries, r.Values = r.Entries-1, r.Values[1:] })
			return s
		}(), "u1", nil, "NOT VERIFIED"},
	} {
		out, err := verify(t, c.srv, c.token, c.extra...)
		if err == nil {
			t.Errorf("%s: verified:\n%s", name, out)
			continue
		}
		if !strings.Contains(out+err.Error(), c.want) {
			t.Errorf("%s: %v\n%s\nwant %q in it", name, err, out, c.want)
		}
	}
}
