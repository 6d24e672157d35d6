package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// apiError is every error body the gateway writes: a stable code for programs, a message
// for people, and the offending fields for validation errors.
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

// errBodyTooLarge and errBadJSON come from decodeStrict; handlers map them with badInput.
var errBodyTooLarge = errors.New("request body too large")

// decodeStrict reads exactly one JSON object of at most limit bytes into v, rejecting
// unknown fields and trailing data, so a typo in a field name is an error rather than a
// silently ignored setting.
func decodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type %q: want application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooLarge):
			return errBodyTooLarge
		case errors.Is(err, io.EOF):
			return errors.New("empty body: want a JSON object")
		case errors.As(err, &syntax):
			return fmt.Errorf("malformed JSON at byte %d", syntax.Offset)
		case errors.As(err, &typ):
			return fmt.Errorf("field %q: want %s", typ.Field, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
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
	return nil
}

// badInput writes the 4xx for a decode or validation error.
func badInput(w http.ResponseWriter, err error) {
	var verr seckill.ValidationError
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", err.Error())
	case errors.As(err, &verr):
		writeJSON(w, http.StatusBadRequest, apiError{Code: "invalid_input", Message: err.Error(), Fields: verr})
	default:
		writeError(w, http.StatusBadRequest, "invalid_input", err.Error())
	}
}
