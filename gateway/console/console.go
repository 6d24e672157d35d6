// Package console is the operator console: a static page on the gateway's admin listener
// that drives the admin API from a browser, and the sign-in that trades the admin token for
// a session cookie scripts cannot read. The page holds no data; every number it shows comes
// from the admin API, which accepts a console session (Verify) besides the bearer token.
package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

const (
	// CookieName is the session cookie: HttpOnly, SameSite=Strict, signed (see signer).
	CookieName = "seckill_console"
	// GuardHeader must be "1" on every console request the session authorizes. A cross-site
	// page can make the browser send the cookie, but not a custom header without a CORS
	// preflight, which the gateway never grants: this is the CSRF guard.
	GuardHeader = "X-Seckill-Console"
	// defaultActor names who acted when the operator left the name empty.
	defaultActor = "console"
	loginLimit   = 4 << 10
)

// Console serves the page and its sign-in, and checks console sessions for the admin API.
type Console struct {
	token  [sha256.Size]byte
	signer signer
	ttl    time.Duration
	now    func() time.Time
	assets map[string]asset
}

// New returns the console for the admin token; now is the clock; ttl the session lifetime
// (12h when not positive).
func New(adminToken string, ttl time.Duration, now func() time.Time) *Console {
	if ttl <= 0 {
		ttl = 12 * time.Hour
	}
	return &Console{
		token:  sha256.Sum256([]byte(adminToken)),
		signer: newSigner(adminToken),
		ttl:    ttl,
		now:    now,
		assets: loadAssets(),
	}
}

// Register mounts GET /console/, its assets, POST /console/login and POST /console/logout
// on mux (and GET /console/session, which names who is signed in).
func (c *Console) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	})
	mux.Handle("GET /console/{$}", secured(c.serveAsset("index.html")))
	mux.Handle("GET /console/app.js", secured(c.serveAsset("app.js")))
	mux.Handle("GET /console/app.css", secured(c.serveAsset("app.css")))
	mux.Handle("POST /console/login", secured(http.HandlerFunc(c.login)))
	mux.Handle("POST /console/logout", secured(http.HandlerFunc(c.logout)))
	mux.Handle("GET /console/session", secured(http.HandlerFunc(c.session)))
}

// Verify reports whether r carries a valid console session cookie AND the header
// "X-Seckill-Console: 1" (the CSRF guard: a cross-site page cannot set a custom header
// without a CORS preflight, which we never grant), and returns the signed-in name.
func (c *Console) Verify(r *http.Request) (actor string, ok bool) {
	if r.Header.Get(GuardHeader) != "1" {
		return "", false
	}
	cookie, err := r.Cookie(CookieName)
	if err != nil {
		return "", false
	}
	actor, err = c.signer.verify(cookie.Value, c.now())
	return actor, err == nil
}

type loginInput struct {
	Token string `json:"token"`
	Name  string `json:"name"`
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	var in loginInput
	if err := decodeJSON(w, r, loginLimit, &in); err != nil {
		jsonapi.WriteError(w, http.StatusBadRequest, "invalid_input", err.Error())
		return
	}
	name := strings.TrimSpace(in.Name)
	if name == "" {
		name = defaultActor
	}
	if !seckill.ValidUserID(name) {
		jsonapi.Write(w, http.StatusBadRequest, apiError{Code: "invalid_input", Message: "name: 1 to 64 printable characters without spaces or '|'",
			Fields: []seckill.FieldError{{Field: "name", Message: "must be 1 to 64 printable characters without spaces or '|'"}}})
		return
	}
	// Hashing both sides first makes the comparison's time independent of the token's length.
	sum := sha256.Sum256([]byte(in.Token))
	if subtle.ConstantTimeCompare(sum[:], c.token[:]) != 1 {
		jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "wrong admin token")
		return
	}
	http.SetCookie(w, c.cookie(r, c.signer.sign(name, c.now().Add(c.ttl)), int(c.ttl/time.Second)))
	w.WriteHeader(http.StatusNoContent)
}

// logout expires the cookie. It needs no valid session: signing out of an expired one must
// work too.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, c.cookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

// session names who is signed in, so a reloaded page knows whether to show the sign-in form.
func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	actor, ok := c.Verify(r)
	if !ok {
		jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "sign in to the console")
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]string{"name": actor})
}

// cookie carries value with the attributes every console cookie has; maxAge < 0 deletes it.
// Secure whenever the browser reached us over HTTPS (directly or through a TLS-terminating
// proxy): a forged X-Forwarded-Proto can only break its sender's own sign-in.
func (c *Console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     CookieName,
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
}
