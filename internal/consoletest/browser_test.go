package consoletest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill-pipeline/seckill/internal/harness"
)

// chromiumPath finds the system chromium (make test has deploy/local/stack install it). Without it the
// browser tests skip, except under CI, where a skipped browser test would prove nothing.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found on PATH: the console's browser tests need it (make test installs it: SECKILL_WITH_CHROMIUM=1 deploy/local/stack up; or apt-get install chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifactDir is where a failing browser test leaves its screenshot and page text:
// $SECKILL_TEST_ARTIFACTS, else results/test-artifacts under the repository (git-ignored).
func artifactDir() string {
	if d := os.Getenv("SECKILL_TEST_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(harness.Root(), "results", "test-artifacts")
}

// browser is one headless chromium tab on the console.
type browser struct {
	ctx  context.Context
	base string // http://<admin address>
}

// newBrowser starts chromium with a width×height window; it is closed when the test ends.
func newBrowser(t *testing.T, base string, width, height int) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.WindowSize(width, height),
	)
	// Chromium's sandbox cannot start as root (CI containers run as root); as anyone else it
	// stays on.
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser and ties it to ctx for good, so it cannot take a
	// timeout context of its own: bound it from outside.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("chromium did not start within 30s")
	}
	return &browser{ctx: ctx, base: base}
}

// run runs actions with a deadline, failing the test with what was being done.
func (b *browser) run(t testing.TB, what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression (a promise is awaited).
func eval[T any](t testing.TB, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// open loads the console at hash (e.g. "#/live").
func (b *browser) open(t testing.TB, hash string) {
	t.Helper()
	b.run(t, "open the console", 20*time.Second, chromedp.Navigate(b.base+"/console/"+hash))
}

// goTo moves the page to hash as a link click would (no reload).
func (b *browser) goTo(t testing.TB, hash string) {
	t.Helper()
	eval[string](t, b, fmt.Sprintf("location.hash = %q", hash))
}

func (b *browser) click(t testing.TB, sel string) {
	t.Helper()
	b.run(t, "click "+sel, 10*time.Second, chromedp.Click(chromedp.CSS(sel)))
}

func (b *browser) setValue(t testing.TB, sel, v string) {
	t.Helper()
	// Through JavaScript rather than chromedp.SetValue, which reports setting "" as a failure.
	b.waitPresent(t, sel, 10*time.Second)
	q, _ := json.Marshal(sel)
	val, _ := json.Marshal(v)
	eval[string](t, b, fmt.Sprintf("document.querySelector(%s).value = %s", q, val))
}

// typeKeys types v into sel as keystrokes (kb.Enter submits its form).
func (b *browser) typeKeys(t testing.TB, sel, v string) {
	t.Helper()
	b.run(t, "type into "+sel, 10*time.Second, chromedp.SendKeys(chromedp.CSS(sel), v))
}

// tid is the CSS selector of a data-testid.
func tid(id string) string { return fmt.Sprintf("[data-testid=%q]", id) }

// textJS is a JS expression for the text of the element sel, or null while it is absent.
func textJS(sel string) string {
	q, _ := json.Marshal(sel)
	return fmt.Sprintf("(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : null; })()", q)
}

// waitFor polls until cond accepts the text of sel (absent: ""), and returns that text.
func (b *browser) waitFor(t testing.TB, sel, want string, d time.Duration, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		got, err := chromedp.Run(ctx, chromedp.Evaluate[*string](textJS(sel)))
		cancel()
		text := ""
		if got != nil {
			text = *got
		}
		if err == nil && got != nil && cond(text) {
			return text
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %s shows %q (present: %v, error: %v); want %s", d, sel, text, got != nil, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitJS waits until the JavaScript expression js is true.
func (b *browser) waitJS(t testing.TB, what, js string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still waiting for %s (%s: %v, error: %v)", d, what, js, ok, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitText waits until sel's text contains want.
func (b *browser) waitText(t testing.TB, sel, want string, d time.Duration) string {
	t.Helper()
	return b.waitFor(t, sel, fmt.Sprintf("it to contain %q", want), d, func(s string) bool { return strings.Contains(s, want) })
}

// waitPresent waits until sel exists.
func (b *browser) waitPresent(t testing.TB, sel string, d time.Duration) string {
	t.Helper()
	return b.waitFor(t, sel, "it present", d, func(string) bool { return true })
}

// text returns sel's text now ("" when absent).
func (b *browser) text(t testing.TB, sel string) string {
	t.Helper()
	got := eval[*string](t, b, textJS(sel))
	if got == nil {
		return ""
	}
	return *got
}

// saveOnFailure leaves a full-page screenshot and the page's text under artifactDir when t
// fails, and names the files in the test log. Register it after newBrowser (cleanups run in
// reverse, so it runs while the browser is still open).
func (b *browser) saveOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir := artifactDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("artifacts: %v", err)
			return
		}
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
		ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
		defer cancel()
		url, _ := chromedp.Run(ctx, chromedp.Location())
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("artifacts: capture the page: %v", err)
			return
		}
		shot := filepath.Join(dir, name+".png")
		page := filepath.Join(dir, name+".txt")
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Logf("artifacts: %v", err)
		}
		if err := os.WriteFile(page, []byte(url+"\n\n"+text), 0o644); err != nil {
			t.Logf("artifacts: %v", err)
		}
		t.Logf("the page when %s failed: screenshot %s, text %s", t.Name(), shot, page)
	})
}

// screenshot saves a full-page PNG of the current view to path.
func (b *browser) screenshot(t testing.TB, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
