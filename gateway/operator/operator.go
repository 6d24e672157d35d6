// Package operator names who acts on the admin API: each operator signs in with a credential
// of their own (a named admin token), and the audit logs record that credential's name, never
// a name the caller typed. The credentials are a file of "name sha256:<hex> [role]" lines,
// re-read when it changes, plus SECKILL_ADMIN_TOKEN as the credential "admin" for
// compatibility. Each credential carries a Role, which bounds the admin routes it may call.
package operator

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// LegacyName is the name of the single SECKILL_ADMIN_TOKEN credential.
const LegacyName = "admin"

// reserved are the names the automation writes as actors in the audit logs (the reconciler's
// corrections, the exceptions table's "system" reopenings, the console's old default name)
// and the legacy credential's: no file credential may carry one, in any letter case, so no
// operator can act as the automation or pass an action off as another's.
var reserved = []string{LegacyName, "console", "consumer", "gateway", "reconciler", "relay", "system"}

// Reserved reports whether name belongs to the automation (or the legacy credential).
func Reserved(name string) bool {
	for _, r := range reserved {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// Role is what a credential may do on the admin listener. Each role may do what the ones
// before it may: a scrape credential reads the metrics only; a viewer also reads the admin
// API (catalog, audit, exceptions, overview); an operator also changes the sale (create,
// preheat, close, adjust stock, act on exceptions); an admin also reads the profiles
// (pprof). The zero Role is no credential and may do nothing.
type Role int

// The roles, least first.
const (
	RoleScrape Role = iota + 1
	RoleViewer
	RoleOperator
	RoleAdmin
)

// DefaultRole is the role of a file line that names none: every credential could do
// everything before roles existed, so a file written then keeps working unchanged.
const DefaultRole = RoleAdmin

var roleNames = map[Role]string{RoleScrape: "scrape", RoleViewer: "viewer", RoleOperator: "operator", RoleAdmin: "admin"}

// String is the role's name as a credentials file and the route table spell it.
func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return "none"
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, bool) {
	for r, n := range roleNames {
		if n == s {
			return r, true
		}
	}
	return 0, false
}

// Allows reports whether a credential of role r may call a route that needs need.
func (r Role) Allows(need Role) bool {
	return r != 0 && need != 0 && r >= need
}

// Credential is one operator's name, the SHA-256 of their token and their role.
type Credential struct {
	Name string
	Hash [sha256.Size]byte
	Role Role
}

// Parse reads a credentials file: one "name sha256:<64 hex digits> [role]" per line (role:
// scrape, viewer, operator or admin; absent: DefaultRole); blank lines and lines starting
// with '#' are skipped. A name is 1 to 64 printable ASCII characters
// without spaces or '|' and not reserved; hashes are unique. A name may repeat, spelled the
// same: while a token is rotated its old and new lines stand side by side and both act as
// that name, and must carry the same role; spelled in another letter case it is refused (two
// actors a reader cannot tell apart). Every bad line is reported, by number.
func Parse(r io.Reader) ([]Credential, error) {
	var out []Credential
	var errs []error
	type seen struct {
		line int
		name string
		role Role
	}
	names, hashes := map[string]seen{}, map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 && len(fields) != 3 {
			errs = append(errs, fmt.Errorf("line %d: want \"name sha256:<hex> [role]\"", n))
			continue
		}
		name, digest, role := fields[0], fields[1], DefaultRole
		if len(fields) == 3 {
			r, ok := ParseRole(fields[2])
			if !ok {
				errs = append(errs, fmt.Errorf("line %d: role %q: want scrape, viewer, operator or admin", n, fields[2]))
				continue
			}
			role = r
		}
		hexSum, ok := strings.CutPrefix(digest, "sha256:")
		sum, err := hex.DecodeString(hexSum)
		switch {
		case !seckill.ValidUserID(name):
			errs = append(errs, fmt.Errorf("line %d: name %q: want 1 to 64 printable characters without spaces or '|'", n, name))
			continue
		case Reserved(name):
			errs = append(errs, fmt.Errorf("line %d: name %q is reserved (the automation's names and %q are: %s)", n, name,
				LegacyName, strings.Join(reserved, ", ")))
			continue
		case !ok || err != nil || len(sum) != sha256.Size:
			errs = append(errs, fmt.Errorf("line %d (%s): want sha256: and 64 hex digits, e.g. from printf %%s \"$TOKEN\" | sha256sum", n, name))
			continue
		}
		c := Credential{Name: name, Hash: [sha256.Size]byte(sum), Role: role}
		if c.Hash == sha256.Sum256(nil) {
			errs = append(errs, fmt.Errorf("line %d (%s): the hash of an empty token (printf %%s \"$TOKEN\" with TOKEN unset?)", n, name))
			continue
		}
		if prev, dup := names[strings.ToLower(name)]; dup && prev.name != name {
			errs = append(errs, fmt.Errorf("line %d: name %q again (line %d, as %q)", n, name, prev.line, prev.name))
			continue
		}
		if prev, dup := names[strings.ToLower(name)]; dup && prev.role != role {
			// A rotation must not change what the name may do, one token or the other.
			errs = append(errs, fmt.Errorf("line %d: %s with role %s, but %s on line %d", n, name, role, prev.role, prev.line))
			continue
		}
		if prev, dup := hashes[c.Hash]; dup {
			// One token, two names: the actor of its requests would be ambiguous.
			errs = append(errs, fmt.Errorf("line %d (%s): the same token as line %d", n, name, prev))
			continue
		}
		if _, dup := names[strings.ToLower(name)]; !dup {
			names[strings.ToLower(name)] = seen{n, name, role}
		}
		hashes[c.Hash] = n
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// Credentials are the operators' credentials: the file's, re-read whenever its
// modification time or size changes (checked on every use and every scrape of the metrics,
// so a removed line stops working on the next request), and the legacy token's, if any. A
// reload fails closed: a file that cannot be read, does not parse or leaves no credential at
// all (the rules of the start) is refused, the last good set stays in force, and the failure
// is reported to onReloadError and counted once per change of the file.
type Credentials struct {
	path          string
	legacy        []Credential // SECKILL_ADMIN_TOKEN, and during its rotation the previous one
	onReloadError func(error)

	mu       sync.Mutex
	file     []Credential
	stamp    fileStamp
	failed   bool   // the file on disk was refused; the set read before is in force
	failures uint64 // refused reloads, one per change of the file
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Load reads the credentials file at path ("" for none) and adds legacyToken ("" for none)
// as the credential "admin". It fails when the file is unreadable or invalid, or when there is
// no credential at all.
func Load(path, legacyToken string, onReloadError func(error)) (*Credentials, error) {
	c := &Credentials{path: path, onReloadError: onReloadError}
	if legacyToken != "" {
		c.legacy = []Credential{{Name: LegacyName, Hash: sha256.Sum256([]byte(legacyToken)), Role: RoleAdmin}}
	}
	if path != "" {
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("admin tokens file: %w", err)
		}
		if err := c.read(fileStamp{st.ModTime(), st.Size()}); err != nil {
			return nil, err
		}
	}
	if len(c.legacy) == 0 && len(c.file) == 0 {
		return nil, errors.New("neither SECKILL_ADMIN_TOKENS_FILE nor SECKILL_ADMIN_TOKEN is set")
	}
	return c, nil
}

// read parses the file and, if it is valid, makes it the current set. Callers hold mu (or
// own c exclusively).
func (c *Credentials) read(stamp fileStamp) error {
	c.stamp = stamp
	raw, err := os.ReadFile(c.path)
	if err != nil {
		return fmt.Errorf("admin tokens file: %w", err)
	}
	creds, err := Parse(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("admin tokens file %s: %w", c.path, err)
	}
	if len(creds) == 0 && len(c.legacy) == 0 {
		// Most likely cut short while being written; applied, it would lock every operator out.
		return fmt.Errorf("admin tokens file %s holds no credential and SECKILL_ADMIN_TOKEN is not set", c.path)
	}
	for _, f := range creds {
		for _, l := range c.legacy {
			if f.Hash == l.Hash {
				return fmt.Errorf("admin tokens file %s: %s has the token of SECKILL_ADMIN_TOKEN or its previous one (%s)", c.path, f.Name, LegacyName)
			}
		}
	}
	c.file = creds
	return nil
}

// AcceptPrevious adds the previous SECKILL_ADMIN_TOKEN (SECKILL_ADMIN_TOKEN_PREVIOUS) as the
// credential "admin" too, for the overlap of its rotation ("" adds nothing). It must differ
// from every token in the file.
func (c *Credentials) AcceptPrevious(token string) error {
	if token == "" {
		return nil
	}
	if len(c.legacy) == 0 {
		return fmt.Errorf("SECKILL_ADMIN_TOKEN_PREVIOUS is set without SECKILL_ADMIN_TOKEN")
	}
	cr := Credential{Name: LegacyName, Hash: sha256.Sum256([]byte(token)), Role: RoleAdmin}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.file {
		if f.Hash == cr.Hash {
			return fmt.Errorf("admin tokens file %s: %s has the token of SECKILL_ADMIN_TOKEN_PREVIOUS", c.path, f.Name)
		}
	}
	if cr.Hash != c.legacy[0].Hash {
		c.legacy = append(c.legacy, cr)
	}
	return nil
}

// current returns the credentials in force, re-reading the file first if it changed.
func (c *Credentials) current() []Credential {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh()
	out := c.file
	if len(c.legacy) > 0 {
		out = append(out[:len(out):len(out)], c.legacy...)
	}
	return out
}

// refresh re-reads the file if its stamp changed. Callers hold mu.
func (c *Credentials) refresh() {
	if c.path != "" {
		st, err := os.Stat(c.path)
		var stamp fileStamp
		if err == nil {
			stamp = fileStamp{st.ModTime(), st.Size()}
		}
		if stamp != c.stamp {
			if err == nil {
				err = c.read(stamp)
			} else {
				c.stamp = stamp
				err = fmt.Errorf("admin tokens file: %w", err)
			}
			c.failed = err != nil
			if err != nil {
				c.failures++
				if c.onReloadError != nil {
					c.onReloadError(fmt.Errorf("%w (keeping the %d credentials read before)", err, len(c.file)))
				}
			}
		}
	}
}

// Authenticate returns the name of the credential whose token is token. The token's hash
// is compared with every credential's in constant time, whichever matches (hashing first
// also hides the token's length).
func (c *Credentials) Authenticate(token string) (name string, ok bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	creds := c.current()
	for i := range creds {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], creds[i].Hash[:]), i, found)
	}
	if found < 0 || token == "" {
		return "", false
	}
	return creds[found].Name, true
}

// Hashes returns the hashes of the named credential's tokens (two during a rotation's
// overlap, else one; none once it is removed): a console session is bound to the token it
// signed in with, so removing that token ends its sessions.
func (c *Credentials) Hashes(name string) [][sha256.Size]byte {
	var out [][sha256.Size]byte
	for _, cr := range c.current() {
		if cr.Name == name {
			out = append(out, cr.Hash)
		}
	}
	return out
}

// Role returns the role of the named credential (0 once it is removed): looked up on every
// request, so a role lowered in the file holds from the next request on, sessions included.
func (c *Credentials) Role(name string) Role {
	for _, cr := range c.current() {
		if cr.Name == name {
			return cr.Role
		}
	}
	return 0
}
