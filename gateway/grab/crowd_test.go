package grab

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-pipeline/seckill/gateway/admission"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// After the last unit, a keyless grab is answered from the flag before its token is read
// (whether a prize is sold out is public), and so is one of a session not open; a keyed
// grab, which may repeat one admitted before the sell-out, and a grab with a body still
// take the whole path.
func TestPublicAnswersComeBeforeTheToken(t *testing.T) {
	e := newGrabEnv(t, 1, 5, 1)
	expect(t, "last unit", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001"), 202, "")
	expect(t, "sold out, sets the flag", e.grab(t, e.open, e.prizeA, "bob", ""), 409, "sold_out")
	path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeA)

	expect(t, "keyless, no token", e.request(t, "POST", path, "", "", ""), 409, "sold_out")
	expect(t, "keyless, a forged token", e.request(t, "POST", path, "not-a-token", "", ""), 409, "sold_out")
	expect(t, "keyed, no token", e.request(t, "POST", path, "", "carol-key-0001", ""), 401, "unauthorized")
	expect(t, "keyless with a body, no token", e.request(t, "POST", path, "", "", "{}"), 401, "unauthorized")
	expect(t, "keyless with a bad body", e.request(t, "POST", path, e.token(t, "dave"), "", "[]"), 400, "")
	// The repeat of the grab admitted before the sell-out still hears its status.
	expect(t, "keyed repeat of the last unit", e.grab(t, e.open, e.prizeA, "alice", "alice-key-0001"), 202, "")
	// A session not open is public too; a keyed grab there still needs its token.
	later := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.later.ID, e.prizeA)
	expect(t, "keyless, not open, no token", e.request(t, "POST", later, "", "", ""), 409, "not_open")
	expect(t, "keyed, not open, no token", e.request(t, "POST", later, "", "erin-key-0001", ""), 401, "unauthorized")
	// Another prize's flag is its own.
	expect(t, "other prize, no token", e.request(t, "POST",
		fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", e.open.ID, e.prizeB), "", "", ""), 401, "unauthorized")
	if got := testutil.ToFloat64(e.api.metrics.responses.WithLabelValues("grab", "409")); got != 4 {
		t.Fatalf("grab 409s counted %v, want 4: the public answers counted too", got)
	}
}

// Over the admission limit a grab is refused at once, before Redis: 503 overloaded with a
// Retry-After of whole seconds, and nothing reserved.
func TestOverTheAdmissionLimitIsRefusedBeforeRedis(t *testing.T) {
	var gate *admission.Gate
	e := newGrabEnv(t, 5, 5, 1, func(a *API) {
		gate = admission.New(admission.Config{Min: 1, Max: 1, RetryAfterMax: 4})
		a.admission = gate
	})
	if !gate.Enter() { // the one place, taken by a grab still in Redis and Kafka
		t.Fatal("the empty gate refused")
	}
	for i := range 20 {
		a := e.grab(t, e.open, e.prizeA, "user-"+strconv.Itoa(i), "")
		expect(t, "over the limit", a, 503, "overloaded")
		if s, err := strconv.Atoi(a.hdr.Get("Retry-After")); err != nil || s < 1 || s > 4 {
			t.Fatalf("Retry-After %q, want whole seconds in [1, 4]", a.hdr.Get("Retry-After"))
		}
	}
	left, err := e.rdb.HGet(t.Context(), stock.KeysFor(e.open.ID, e.prizeA).Meta, "left").Int()
	if err != nil {
		t.Fatalf("read the stock left: %v", err)
	}
	if left != 5 {
		t.Fatalf("%d units left after refused grabs, want all 5: a refusal must cost no reservation", left)
	}
	gate.Leave(time.Millisecond)
	expect(t, "a place again", e.grab(t, e.open, e.prizeA, "late", ""), 202, "")
}
