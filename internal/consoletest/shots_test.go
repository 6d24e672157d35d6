package consoletest

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

var shotsDir = flag.String("shots", "", "save the console's screenshots into this folder (make console-shots: docs/console)")

// TestConsoleShots makes the screenshots of docs/console on a demo sale: an open session
// with grabs still coming in, an upcoming one, a dead-lettered grab waiting as a case, and
// two reconciler runs. It runs only with -shots (make console-shots), and fails like any
// other browser test when a view does not show what it should.
func TestConsoleShots(t *testing.T) {
	if *shotsDir == "" {
		t.Skip("screenshots only with -shots DIR (make console-shots)")
	}
	if err := os.MkdirAll(*shotsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	chromiumPath(t) // skip or fail before starting any process
	p := startPipeline(t)
	sale := p.createActivity("spring sale", time.Now().Add(8*time.Second).Truncate(time.Second), map[string]int{"phone": 100, "headphones": 40, "charger": 25})
	p.createActivity("summer sale", time.Now().Add(30*24*time.Hour).Truncate(time.Hour), map[string]int{"laptop": 20})
	p.mustAdmin("POST", fmt.Sprintf("/admin/v1/sessions/%d/preheat", sale.Session), nil, nil, http.StatusOK)
	waitUntil(t, 30*time.Second, func() string { return "the spring sale's first session opens" }, func() bool {
		_, _, state := apiFigures(p, sale.Session, sale.Prizes["phone"])
		return state == "open"
	})

	b := newBrowser(t, p.admin, 1280, 900)
	b.saveOnFailure(t)
	save := func(name string) {
		t.Helper()
		b.screenshot(t, filepath.Join(*shotsDir, name))
		t.Logf("saved %s", filepath.Join(*shotsDir, name))
	}
	b.open(t, "#/live")
	b.waitPresent(t, "#sign-in:not([hidden])", 10*time.Second)
	save("sign-in.png")
	b.setValue(t, "#sign-in-token", p.operatorToken)
	b.typeKeys(t, "#sign-in-token", kb.Enter)
	b.waitText(t, tid("live-updated"), "updated", 10*time.Second)

	// A dead letter to show on the Exceptions views (see replayDeadLetter); the row comes
	// back at once so Live shows every prize, and the case stays open for replay.
	requestID, restore := p.poisonedGrab("mallory", sale.Session, sale.Prizes["charger"])
	caseID := p.waitCase(t, seckill.CaseDeadLetter, requestID)
	restore()
	p.reconcileOnce()

	// Grabs in two waves a refresh apart, so admissions/s shows a rate.
	user := 0
	wave := func(n int) {
		for range n {
			user++
			u := fmt.Sprintf("user%03d", user)
			p.mustGrab(u, sale.Session, sale.Prizes["phone"])
			if user%2 == 0 {
				p.mustGrab(u, sale.Session, sale.Prizes["headphones"])
			}
		}
	}
	wave(14)
	phoneRate := tid(fmt.Sprintf("prize-%d-%d-rate", sale.Session, sale.Prizes["phone"]))
	b.waitFor(t, phoneRate, "a rate", 10*time.Second, func(s string) bool { _, err := strconv.ParseFloat(s, 64); return err == nil })
	wave(9)
	b.waitFor(t, phoneRate, "a rate above zero", 10*time.Second, func(s string) bool { f, _ := strconv.ParseFloat(s, 64); return f > 0 })
	save("live.png")

	b.run(t, "phone viewport", 10*time.Second, chromedp.EmulateViewport(390, 844))
	b.waitText(t, tid("live-updated"), "updated", 10*time.Second)
	save("live-phone.png")
	b.run(t, "desktop viewport", 10*time.Second, chromedp.EmulateViewport(1280, 900))

	b.goTo(t, "#/activities")
	b.waitText(t, tid("activities-list"), "summer sale", 10*time.Second)
	save("activities.png")

	b.goTo(t, fmt.Sprintf("#/activities/%d", sale.ID))
	b.waitPresent(t, tid(fmt.Sprintf("session-row-%d", sale.Session)), 10*time.Second)
	save("activity.png")

	b.goTo(t, "#/exceptions?state=open")
	b.waitPresent(t, tid(fmt.Sprintf("case-%d", caseID)), 10*time.Second)
	save("exceptions.png")

	b.goTo(t, fmt.Sprintf("#/exceptions/%d", caseID))
	b.waitPresent(t, tid("replay"), 10*time.Second)
	save("exception.png")

	p.reconcileOnce()
	b.goTo(t, "#/reports")
	b.waitPresent(t, "[data-testid^=report-]", 10*time.Second)
	save("reports.png")
}
