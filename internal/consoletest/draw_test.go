package consoletest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
)

// drawRecord is the part of a draw's record the draw step compares.
type drawRecord struct {
	Phase      string `json:"phase"`
	Commitment string `json:"commitment"`
}

// drawPrize: the activity form makes a draw prize (a draw without an entry window shows the
// API's field message next to the window's input); the activity page lists it as a draw and
// links each session's stock line to the prize page. Before the preheat the page has no Draw
// card (the panel is a 404); once a preheat through the API commits the draw, the card shows
// the phase committed and the commitment the public record and the admin panel publish, no
// entrants yet, and no beacon form (this gateway names no beacon).
func drawPrize(t *testing.T, b *browser, p *pipeline) {
	b.goTo(t, "#/activities")
	b.waitPresent(t, "#activity-form", 10*time.Second)
	name := "console-draw-" + stacktest.ID(t)
	b.setValue(t, "#act-name", name)
	b.setValue(t, "#act-prize-name-0", "sneaker")
	b.setValue(t, "#act-prize-stock-0", "5")
	b.setValue(t, "#act-prize-admission-0", "draw")
	b.setValue(t, "#act-prize-entry-window-0", "")
	b.click(t, "#create-activity")
	b.waitText(t, `[data-field-error="prizes[0].entry_window"]`, "must be 1s to", 10*time.Second)

	b.setValue(t, "#act-prize-entry-window-0", "10s")
	b.click(t, "#create-activity")
	b.waitText(t, tid("activity-name"), name, 10*time.Second)
	b.waitText(t, tid("activity-prizes"), "sneaker × 5 (draw, 10s window)", 5*time.Second)

	id := strings.TrimPrefix(eval[string](t, b, "location.hash"), "#/activities/")
	var act struct {
		Prizes []struct {
			ID          int64  `json:"id"`
			Admission   string `json:"admission"`
			EntryWindow string `json:"entry_window"`
		} `json:"prizes"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
	}
	p.mustAdmin("GET", "/admin/v1/activities/"+id, nil, &act, http.StatusOK)
	if len(act.Prizes) != 1 || act.Prizes[0].Admission != "draw" || act.Prizes[0].EntryWindow != "10s" || len(act.Sessions) == 0 {
		t.Fatalf("activity %s from the API: %+v", id, act)
	}
	sid, pid := act.Sessions[0].ID, act.Prizes[0].ID
	panelPath := fmt.Sprintf("/admin/v1/sessions/%d/prizes/%d/draw", sid, pid)

	// Not committed yet: no panel, so no card.
	p.mustAdmin("GET", panelPath, nil, nil, http.StatusNotFound)
	link := tid(fmt.Sprintf("stock-%d-%d-draw", sid, pid))
	b.waitText(t, link, "draw", 5*time.Second)
	b.click(t, link)
	b.waitText(t, tid("prize-updated"), "updated", 10*time.Second)
	if eval[bool](t, b, `!document.querySelector('[data-testid="draw-card"]').hidden`) {
		t.Fatal("the Draw card shows before the draw is committed")
	}
	if msg := b.text(t, tid("prize-error")); msg != "" {
		t.Fatalf("the prize page before the preheat: %s", msg)
	}

	p.mustAdmin("POST", fmt.Sprintf("/admin/v1/sessions/%d/preheat", sid), nil, nil, http.StatusOK)
	var panel struct {
		Record drawRecord `json:"record"`
	}
	p.mustAdmin("GET", panelPath, nil, &panel, http.StatusOK)
	var public drawRecord
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/sessions/%d/prizes/%d/draw", p.public, sid, pid), nil)
	if code := p.do(req, &public); code != http.StatusOK {
		t.Fatalf("public draw record: %d", code)
	}
	if public.Phase != "committed" || len(public.Commitment) != 64 || public != panel.Record {
		t.Fatalf("the public record %+v and the admin panel's %+v, want the same committed record", public, panel.Record)
	}

	b.waitText(t, tid("draw-phase"), "committed", 10*time.Second)
	if got := b.text(t, tid("draw-commitment")); got != public.Commitment {
		t.Errorf("the card's commitment %q, want %q", got, public.Commitment)
	}
	if got := b.text(t, tid("draw-entrants")); got != "none yet" {
		t.Errorf("the card's entrants %q, want none yet", got)
	}
	if got := b.text(t, tid("draw-beacon")); !strings.HasPrefix(got, "none") {
		t.Errorf("the card's beacon %q, want none", got)
	}
	if !eval[bool](t, b, `document.getElementById('beacon-form').hidden`) {
		t.Error("the beacon form shows for a draw that names no beacon round")
	}
	b.waitText(t, tid("draw-winners"), "No place offered a unit yet.", 5*time.Second)
	// The page offers the beacon form by the role GET /console/session names (the tests'
	// credential line names none: admin).
	role := eval[string](t, b, `fetch('/console/session', {headers: {'X-Seckill-Console': '1'}}).then((r) => r.json()).then((j) => j.role)`)
	if role != "admin" {
		t.Errorf("GET /console/session names the role %q, want admin", role)
	}
}
