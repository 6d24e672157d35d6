package jsonapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// errBodyTooLarge comes from DecodeStrict; handlers map it with BadInput.
var errBodyTooLarge = errors.New("request body too large")

// DecodeStrict reads exactly one JSON object of at most limit bytes into v, rejecting
// unknown fields and trailing data, so a typo in a field name is an error rather than a
// silently ignored setting. Any other JSON value is refused too: encoding/json reads `null`
// into a struct as "nothing to set", which would let `null` pass for an empty object.
func DecodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type %q: want application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var tooLarge *http.MaxBytesError
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &tooLarge):
			return errBodyTooLarge
		case errors.Is(err, io.EOF):
			return errors.New("empty body: want a JSON object")
		case errors.As(err, &syntax):
			return fmt.Errorf("malformed JSON at byte %d", syntax.Offset)
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errBodyTooLarge
		}
		return errors.New("trailing data after the JSON object")
	}
	if raw[0] != '{' { // the decoder has already skipped leading white space
		return errors.New("want a JSON object")
	}
	obj := json.NewDecoder(bytes.NewReader(raw))
	obj.DisallowUnknownFields()
	if err := obj.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typ):
			return fmt.Errorf("field %q: want %s", typ.Field, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

// BadInput writes the 4xx for a decode or validation error.
func BadInput(w http.ResponseWriter, err error) {
	var verr seckill.ValidationError
	switch {
	case errors.Is(err, errBodyTooLarge):
		WriteError(w, http.StatusRequestEntityTooLarge, "body_too_large", err.Error())
	case errors.As(err, &verr):
		Write(w, http.StatusBadRequest, Error{Code: "invalid_input", Message: err.Error(), Fields: verr})
	default:
		WriteError(w, http.StatusBadRequest, "invalid_input", err.Error())
	}
}

// Errors answers the requests mux has no route for (unknown path: 404; known path,
// other method: 405 with Allow) with the same JSON error body as every other error, instead
// of net/http's plain-text pages. Everything else, redirects included, is mux's.
func Errors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// The mux's own fallback knows which of 404 and 405 it is, and the allowed methods.
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.code {
		case http.StatusNotFound:
			WriteError(w, http.StatusNotFound, "not_found", "no such route")
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", probe.header.Get("Allow"))
			WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed",
				r.Method+" is not allowed here; allowed: "+probe.header.Get("Allow"))
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

// statusProbe records what a fallback handler would answer, and discards its body.
type statusProbe struct {
	header http.Header
	code   int
}

func (p *statusProbe) Header() http.Header { return p.header }
func (p *statusProbe) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}
func (p *statusProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// WholeNumber is an integer field of a request body. JSON Schema's `integer` (what the
// documents promise) is any number with a zero fraction, so 2168.0 and 2.168e3 are 2168
// here as for any client checking against the document; 2168.5 is refused.
type WholeNumber int

// maxExactFloat is 2^53: above it a float64 no longer holds every integer.
const maxExactFloat = 1 << 53

// UnmarshalJSON reads an integer, or a number with a zero fraction within 2^53.
func (n *WholeNumber) UnmarshalJSON(b []byte) error {
	s := string(b)
	// Plain integers exactly; other forms through float64 (strconv bounds the exponent's
	// cost: a 12-byte "1e999999999" is +Inf, not a billion-digit number).
	if v, err := strconv.ParseInt(s, 10, 0); err == nil {
		*n = WholeNumber(v)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxExactFloat {
		return &json.UnmarshalTypeError{Value: "number " + s, Type: reflect.TypeFor[int]()}
	}
	*n = WholeNumber(f)
	return nil
}

// Blank is what a note or reason may not consist of alone, and what is trimmed from its
// ends: the documents' pattern `[^ \t\n\r]` names the same four characters, so the two agree
// on every string (strings.TrimSpace's Unicode spaces would refuse a no-break space the
// document accepts).
const Blank = " \t\n\r"

// TextOK reports whether s is 1 to most characters (as JSON Schema's maxLength counts
// them: code points) and not blank.
func TextOK(s string, most int) bool {
	return utf8.RuneCountInString(s) <= most && strings.Trim(s, Blank) != ""
}

// ParseID accepts a positive integer in canonical form only ("7", not "07" or "+7"), so
// one grab always gets one request id string.
func ParseID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != s {
		return 0, errors.New("must be a positive integer")
	}
	return n, nil
}
