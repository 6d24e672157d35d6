// Package jsonapi is the gateway's JSON on the wire: every listener, the operator console's
// sign-in included, answers errors in one shape, so a client reads every error one way, and
// the APIs read request bodies and ids one strict way (one object, no unknown field, canonical
// numbers).
package jsonapi

import (
	"encoding/json"
	"net/http"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Error is every error body the gateway writes: a stable code for programs, a message for
// people, the offending fields for validation errors, and the request id when a grab may
// have been admitted although the answer is an error (poll it).
type Error struct {
	Code      string               `json:"error"`
	Message   string               `json:"message"`
	Fields    []seckill.FieldError `json:"fields,omitempty"`
	RequestID string               `json:"request_id,omitempty"`
}

// Write answers v as JSON with status; answers are never cached.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Encoded is an answer encoded once, for the answers a crowd gets by the thousand (sold
// out): writing it costs no encoding and no allocation for its headers.
type Encoded struct {
	status int
	body   []byte
}

// Encode encodes v once, as Write would write it, for WriteEncoded.
func Encode(status int, v any) Encoded {
	b, err := json.Marshal(v)
	if err != nil {
		panic("jsonapi: encode a fixed answer: " + err.Error()) // a programming error: fixed values only
	}
	return Encoded{status: status, body: append(b, '\n')}
}

// The header values of every answer, shared: net/http only reads them.
var (
	contentJSON = []string{"application/json"}
	noStore     = []string{"no-store"}
)

// WriteEncoded answers e, with the same headers as Write.
func WriteEncoded(w http.ResponseWriter, e Encoded) {
	h := w.Header()
	h["Content-Type"] = contentJSON
	h["Cache-Control"] = noStore
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

// WriteError answers an Error with code and msg.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	Write(w, status, Error{Code: code, Message: msg})
}
