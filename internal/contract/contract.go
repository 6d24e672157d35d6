// Package contract ties the machine-readable contracts in docs/api to the code: it loads
// the OpenAPI documents of the gateway's two listeners and the AsyncAPI document of the
// Kafka topics, checks each against its specification's meta-schema, and validates real
// HTTP exchanges and real Kafka messages against them, so tests fail when the documents
// and the code drift apart. Tests only: nothing in a service imports it.
package contract

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"
)

// The documents, under docs/api of the module.
const (
	PublicAPI = "openapi-public.yaml"
	AdminAPI  = "openapi-admin.yaml"
	EventsAPI = "asyncapi.yaml"
)

// The specifications' own JSON Schemas, vendored (meta/README.md says from where).
//
//go:embed meta/openapi-3.1.json meta/asyncapi-3.0.0.json
var meta embed.FS

const (
	openAPIMetaURL  = "https://spec.openapis.org/oas/3.1/schema/2025-11-23"
	asyncAPIMetaURL = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
)

// Read returns a document of docs/api, found from the working directory upwards (go test
// runs in the package's directory).
func Read(tb testing.TB, name string) []byte {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			b, err := os.ReadFile(filepath.Join(dir, "docs", "api", name))
			if err != nil {
				tb.Fatal(err)
			}
			return b
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatalf("no go.mod above the working directory: cannot find docs/api/%s", name)
		}
		dir = parent
	}
}

// JSONValue turns a YAML or JSON document into the values encoding/json decodes to (with
// json.Number for numbers), which is what the JSON Schema validator expects.
func JSONValue(doc []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("parse document: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("document is not JSON-compatible: %w", err)
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// Mutated returns a document of docs/api, as JSON, with change applied to its decoded form:
// the deliberately wrong documents that show a check is not vacuous.
func Mutated(tb testing.TB, name string, change func(doc map[string]any)) []byte {
	tb.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(Read(tb, name), &doc); err != nil {
		tb.Fatal(err)
	}
	change(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// At walks a decoded document by keys; it panics on a path the document does not have.
func At(doc map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		doc = doc[k].(map[string]any)
	}
	return doc
}

// CheckOpenAPI validates a document against the OpenAPI 3.1 meta-schema.
func CheckOpenAPI(doc []byte) error {
	return checkMeta(doc, "meta/openapi-3.1.json", openAPIMetaURL)
}

// CheckAsyncAPI validates a document against the AsyncAPI 3.0.0 meta-schema.
func CheckAsyncAPI(doc []byte) error {
	return checkMeta(doc, "meta/asyncapi-3.0.0.json", asyncAPIMetaURL)
}

func checkMeta(doc []byte, file, url string) error {
	raw, err := meta.ReadFile(file)
	if err != nil {
		return err
	}
	schema, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, schema); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return fmt.Errorf("compile %s: %w", file, err)
	}
	v, err := JSONValue(doc)
	if err != nil {
		return err
	}
	return sch.Validate(v)
}
