package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
)

// The page is three files with no build step and nothing fetched from elsewhere, so it works
// on an air-gapped admin network and under the strict CSP below.
//
//go:embed static/index.html static/app.js static/app.css
var static embed.FS

// ContentSecurityPolicy allows only this origin's files: no inline script or style, no
// framing (clickjacking), no <base> that would re-point the page's relative URLs, and forms
// that post only here.
const ContentSecurityPolicy = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

type asset struct {
	body []byte
	etag string
}

// loadAssets reads the embedded files once; a missing one is a build defect the tests catch.
func loadAssets() map[string]asset {
	out := map[string]asset{}
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			continue
		}
		sum := sha256.Sum256(b)
		out[name] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
}

// serveAsset serves an embedded file. no-cache with an ETag: the browser revalidates each
// load (a 304 when unchanged), so a new gateway's page is never mixed with an old script.
func (c *Console) serveAsset(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := c.assets[name]
		if !ok {
			jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such console file")
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", a.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// Secured adds the console's security headers to every answer of next. The gateway wraps
// its whole admin listener in it, not only the console's routes: an error page, a redirect
// or a probe answer opened in the browser is then under the same policy as the page.
func Secured(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}
