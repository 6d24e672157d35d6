package grab

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The grab path's answers that need the path alone to produce (every in-flight slot taken, an
// admission verdict that arrives too late) match docs/api/openapi-public.yaml; the gateway's
// TestGatewayAnswersMatchTheContract checks every other answer through the whole gateway and
// exempts these.
func TestGrabAnswersMatchTheContract(t *testing.T) {
	api := contract.LoadAPI(t, contract.PublicAPI)
	client := &http.Client{Timeout: 10 * time.Second}
	t.Run("overloaded", func(t *testing.T) {
		t.Parallel()
		e := newGrabEnv(t, 5, 5, 1, func(a *API) { a.inflight = make(chan struct{}, 1) })
		e.api.inflight <- struct{}{} // every slot taken
		checkedCall(t, api, client, e.srv.URL, "POST", fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA),
			e.token(t, "alice"), 503, "overloaded")
		checkedCall(t, api, client, e.srv.URL, "GET", "/api/v1/grabs/"+seckill.UserRequestID(e.open.ID, e.prizeA, "alice", "alice-key-0001"),
			e.token(t, "alice"), 503, "overloaded")
		// The draw's routes, mounted when the gateway has draws, go through the same cap.
		e.api.board = draw.NewPublic(store.NewDraws(e.db, time.Now), nil, time.Second, time.Now)
		mux := http.NewServeMux()
		e.api.Register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		for _, path := range []string{"/draw", "/draw/proof"} {
			checkedCall(t, api, client, srv.URL, "GET", fmt.Sprintf("/api/v1/sessions/%d/prizes/%d", e.open.ID, e.prizeA)+path,
				e.token(t, "alice"), 503, "overloaded")
		}
	})
	t.Run("admission verdict late", func(t *testing.T) {
		t.Parallel()
		checkLateVerdict(t, api, client)
	})
}

// checkedCall sends method path with a bearer token to base and checks the exchange: the
// status and error code, the answer and the request against the document.
func checkedCall(t *testing.T, api *contract.API, client *http.Client, base, method, path, token string, status int, code string) (
	contract.Exchange, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	x, err := contract.Do(client, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	_ = json.Unmarshal(x.Answer, &out)
	if x.Status != status || out["error"] != code {
		t.Fatalf("%s %s: %d %.300s, want %d %s", method, path, x.Status, x.Answer, status, code)
	}
	if err := api.CheckAnswer(x); err != nil {
		t.Fatalf("answer breaks the contract: %v", err)
	}
	if err := api.CheckRequest(x); err != nil {
		t.Fatalf("%s %s: the document refuses a request the gateway takes: %v", method, path, err)
	}
	return x, out
}

// checkLateVerdict: an admission verdict that arrives after the gateway stopped waiting
// answers 503 unavailable with the request id and a Location to poll.
func checkLateVerdict(t *testing.T, api *contract.API, client *http.Client) {
	e, proxy := lateVerdictEnv(t)
	proxy.HoldNext()
	x, body := checkedCall(t, api, client, e.srv.URL, "POST", fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA),
		e.token(t, "alice"), 503, "unavailable")
	if x.Header.Get("Location") != "/api/v1/grabs/"+fmt.Sprint(body["request_id"]) {
		t.Fatalf("late verdict: Location %q, body %v", x.Header.Get("Location"), body)
	}
	// Wait for the held script, so it does not outlive the test's keys.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if l, err := e.gate.Lookup(stacktest.Context(t, time.Second), fmt.Sprint(body["request_id"])); err == nil && l.Found {
			return
		}
	}
	t.Fatal("the held admission script never ran")
}
