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

// contentSecurityPolicy allows only this origin's files: no inline script or style, no
// framing (clickjacking).
const contentSecurityPolicy = "default-src 'self'; frame-ancestors 'none'"

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

// secured adds the headers every console answer carries.
func secured(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}
