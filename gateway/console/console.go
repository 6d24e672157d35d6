// Package console is the operator console: a static page on the gateway's admin listener
// that drives the admin API from a browser, and the sign-in that trades an operator's admin
// token for a session cookie scripts cannot read, in that credential's name. The page holds no data; every number it shows comes
// from the admin API, which accepts a console session (Verify) besides the bearer token.
package console

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/operator"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

const (
	// CookieName is the session cookie: HttpOnly, SameSite=Strict, signed (see signer).
	CookieName = "seckill_console"
	// GuardHeader must be "1" on every console request the session authorizes, and on
	// sign-out. A cross-site page can make the browser send the cookie, but not a custom
	// header without a CORS preflight, which the gateway never grants: this is the CSRF guard.
	GuardHeader = "X-Seckill-Console"
	loginLimit  = 4 << 10
)

// Credentials checks operator tokens and names their holders: an *operator.Credentials.
type Credentials interface {
	Authenticate(token string) (name string, ok bool)
	// Hashes are the named credential's token hashes (two while a token is rotated, none
	// once it is removed); a session is bound to the one it signed in with.
	Hashes(name string) [][sha256.Size]byte
	// Role is the named credential's role: a scrape credential (Prometheus's) may not sign
	// in, since the console's every call needs at least a viewer.
	Role(name string) operator.Role
}

// Sessions keeps the sessions server-side (a *sessionstore.Redis): sign-out revokes one,
// one unused for the idle timeout ends, none outlives its absolute end, and every gateway
// sharing the store sees the same sessions.
type Sessions interface {
	Create(ctx context.Context, id string, now, end time.Time, idle time.Duration) error
	Touch(ctx context.Context, id string, now time.Time, idle time.Duration) (bool, error)
	Revoke(ctx context.Context, id string) error
}

// Limiter bounds sign-in attempts per remote address.
type Limiter interface {
	Allow(key string) (bool, time.Duration)
}

// Config is what a Console needs.
type Config struct {
	Credentials Credentials
	// Secret keys the session cookies; every gateway serving the same operators needs the
	// same one for a session to hold across them.
	Secret []byte
	TTL    time.Duration // session's absolute lifetime (12h when not positive)
	Idle   time.Duration // a session unused this long ends (30m when not positive)
	// Sessions holds the sessions server-side (required).
	Sessions Sessions
	Now      func() time.Time // the clock
	Logins   Limiter          // sign-in attempts per remote address (nil: unlimited)
	// Remote names the client of a request for the sign-in limit and the log (nil: the
	// peer's address).
	Remote func(*http.Request) string
	Log    *slog.Logger // sign-ins and refused sign-ins (nil: none)
}

// Console serves the page and its sign-in, and checks console sessions for the admin API.
type Console struct {
	creds    Credentials
	signer   signer
	ttl      time.Duration
	idle     time.Duration
	sessions Sessions
	now      func() time.Time
	logins   Limiter
	remote   func(*http.Request) string
	log      *slog.Logger
	assets   map[string]asset
}

// New returns the console for cfg.
func New(cfg Config) *Console {
	c := &Console{creds: cfg.Credentials, signer: newSigner(cfg.Secret), ttl: cfg.TTL, idle: cfg.Idle,
		sessions: cfg.Sessions, now: cfg.Now, logins: cfg.Logins, remote: cfg.Remote, log: cfg.Log, assets: loadAssets()}
	if c.ttl <= 0 {
		c.ttl = 12 * time.Hour
	}
	if c.idle <= 0 {
		c.idle = 30 * time.Minute
	}
	if c.remote == nil {
		c.remote = clientip.Peer
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Register mounts GET /console/, its assets, POST /console/login and POST /console/logout
// on mux (and GET /console/session, which names who is signed in). The security headers
// (Secured) are the whole admin listener's, set around its mux.
func (c *Console) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	})
	mux.Handle("GET /console/{$}", c.serveAsset("index.html"))
	mux.Handle("GET /console/app.js", c.serveAsset("app.js"))
	mux.Handle("GET /console/app.css", c.serveAsset("app.css"))
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.logout)
	mux.HandleFunc("GET /console/session", c.session)
}

// Verify reports whether r carries a valid console session cookie AND the header
// "X-Seckill-Console: 1" (the CSRF guard: a cross-site page cannot set a custom header
// without a CORS preflight, which we never grant), and returns the name of the credential
// the session was signed in with. A session ends when that credential is removed or its
// token changes, when it is signed out, when it was not used for the idle timeout, and at
// its absolute end; each accepted use restarts the idle timeout.
func (c *Console) Verify(r *http.Request) (actor string, ok bool) {
	if r.Header.Get(GuardHeader) != "1" {
		return "", false
	}
	cookie, err := r.Cookie(CookieName)
	if err != nil {
		return "", false
	}
	now := c.now()
	actor, id, err := c.signer.verify(cookie.Value, now, c.creds.Hashes)
	if err != nil {
		return "", false
	}
	live, err := c.sessions.Touch(r.Context(), id, now, c.idle)
	if err != nil {
		// Refused, not let through: a session that cannot be checked may be a revoked one.
		c.log.Error("console session not checked", "actor", actor, "error", err.Error())
		return "", false
	}
	return actor, live
}

type loginInput struct {
	Token string `json:"token"`
	// Name is accepted for older clients and ignored: the session's name is the
	// credential's, so nobody signs in as someone else.
	Name string `json:"name"`
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	remote := c.remote(r)
	// Before reading the body: a refused attempt learns nothing about any token.
	if ok, wait := c.allowLogin(remote); !ok {
		secs := int(wait/time.Second) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		jsonapi.WriteError(w, http.StatusTooManyRequests, "rate_limited",
			"too many sign-in attempts from this address; retry after "+strconv.Itoa(secs)+"s")
		return
	}
	var in loginInput
	if err := decodeJSON(w, r, loginLimit, &in); err != nil {
		jsonapi.WriteError(w, http.StatusBadRequest, "invalid_input", err.Error())
		return
	}
	if name := strings.TrimSpace(in.Name); name != "" && !seckill.ValidUserID(name) {
		jsonapi.Write(w, http.StatusBadRequest, apiError{Code: "invalid_input", Message: "name: 1 to 64 printable characters without spaces or '|'",
			Fields: []seckill.FieldError{{Field: "name", Message: "must be 1 to 64 printable characters without spaces or '|'"}}})
		return
	}
	name, ok := c.creds.Authenticate(in.Token)
	if !ok {
		// The address, never what was submitted: a mistyped token is nearly the token.
		c.log.Warn("console sign-in refused", "remote_addr", remote, "reason", "no credential has this token")
		jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "wrong admin token")
		return
	}
	// Every call the page makes needs a viewer at least: a scrape credential signed in
	// would get a session on which everything is a 403, so it is told why instead.
	if role := c.creds.Role(name); !role.Allows(operator.RoleViewer) {
		c.log.Warn("console sign-in refused", "actor", name, "remote_addr", remote, "reason", "role "+role.String())
		msg := "credential " + name + " has role " + role.String()
		if role == operator.RoleScrape {
			msg += ": it reads /metrics only"
		}
		jsonapi.WriteError(w, http.StatusForbidden, "forbidden",
			msg+" and cannot sign in to the console; sign in with a viewer, operator or admin credential")
		return
	}
	// The session is bound to this token (a credential has two during a rotation).
	hash := sha256.Sum256([]byte(in.Token))
	id, err := newID()
	now := c.now()
	if err == nil {
		err = c.sessions.Create(r.Context(), id, now, now.Add(c.ttl), c.idle)
	}
	if err != nil {
		c.log.Error("console sign-in failed", "actor", name, "remote_addr", remote, "error", err.Error())
		jsonapi.WriteError(w, http.StatusInternalServerError, "internal", "internal error; see the gateway log")
		return
	}
	c.log.Info("console sign-in", "actor", name, "remote_addr", remote)
	http.SetCookie(w, c.cookie(r, c.signer.sign(name, hash, now.Add(c.ttl), id), int(c.ttl/time.Second)))
	w.WriteHeader(http.StatusNoContent)
}

func (c *Console) allowLogin(remote string) (bool, time.Duration) {
	if c.logins == nil {
		return true, 0
	}
	return c.logins.Allow(remote)
}

// logout revokes the session server-side, so its cookie is refused from now on wherever it
// was copied to, and expires the cookie. It needs the guard header, like every call the
// session makes (another site must not be able to sign an operator out), but no valid
// session: signing out of an expired one must work too.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(GuardHeader) != "1" {
		jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "sign-out needs the header "+GuardHeader+": 1")
		return
	}
	if cookie, err := r.Cookie(CookieName); err == nil {
		if id, ok := sessionID(cookie.Value); ok {
			if err := c.sessions.Revoke(r.Context(), id); err != nil {
				// Not signed out: saying so is better than a cookie that still works elsewhere.
				c.log.Error("console sign-out failed", "remote_addr", c.remote(r), "error", err.Error())
				jsonapi.WriteError(w, http.StatusInternalServerError, "internal", "sign-out failed; see the gateway log")
				return
			}
		}
	}
	http.SetCookie(w, c.cookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

// session names who is signed in, so a reloaded page knows whether to show the sign-in form,
// and the credential's role (read now: a role changed in the file shows at the next
// reload), so the page offers only the actions the role allows. The role is a courtesy to
// the operator, not a guard: every admin route checks it again.
func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	actor, ok := c.Verify(r)
	if !ok {
		jsonapi.WriteError(w, http.StatusUnauthorized, "unauthorized", "sign in to the console")
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]string{"name": actor, "role": c.creds.Role(actor).String()})
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
