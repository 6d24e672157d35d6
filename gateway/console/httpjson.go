package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
)

// apiError is the gateway's error body, so the page reads every error one way.
type apiError = jsonapi.Error

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
