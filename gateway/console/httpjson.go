package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// apiError is the gateway's error body (gateway/httpjson.go): a stable code, a message for
// people, and the offending fields of a validation error. The console keeps the same shape
// so the page reads every error one way.
type apiError struct {
	Code    string               `json:"error"`
	Message string               `json:"message"`
	Fields  []seckill.FieldError `json:"fields,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Code: code, Message: msg})
}

// decodeJSON reads one JSON object of at most limit bytes into v, refusing unknown fields
// and other content types: a cross-site HTML form cannot send application/json, so login
// cannot be driven by another site's form either.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type %q: want application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fmt.Errorf("body over %d bytes", limit)
		}
		return fmt.Errorf("want a JSON object {\"token\", \"name\"}: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
