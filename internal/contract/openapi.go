package contract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// API is one listener's OpenAPI document, with a router over its paths and a record of
// which documented answers were seen.
type API struct {
	Doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]bool // "METHOD /path STATUS"
}

// The components.responses an answer without a route is validated against.
const (
	noSuchRoute      = "NoSuchRoute"      // 404 for a path the listener does not serve
	methodNotAllowed = "MethodNotAllowed" // 405 for a method the path does not allow
)

// LoadAPI loads a document of docs/api, checks it against the OpenAPI 3.1 meta-schema and
// kin-openapi's own validation, and returns it ready to validate exchanges.
func LoadAPI(tb testing.TB, name string) *API {
	tb.Helper()
	raw := Read(tb, name)
	if err := CheckOpenAPI(raw); err != nil {
		tb.Fatalf("%s does not conform to the OpenAPI 3.1 meta-schema: %v", name, err)
	}
	a, err := NewAPI(raw)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return a
}

// rfc3339 makes kin-openapi check format date-time as RFC 3339 writes it. Its own check is
// an expression that takes only upper-case "T" and "Z", stricter than RFC 3339 (section 5.6
// allows "t" and "z") and than the gateway, so the documents could not say "date-time" and
// still describe what the gateway takes. The format registry is kin-openapi's package
// state; this sets it once, before any document is loaded.
var rfc3339 sync.Once

func defineRFC3339() {
	rfc3339.Do(func() {
		openapi3.DefineStringFormatValidator("date-time", openapi3.NewCallbackValidator(func(v string) error {
			if _, err := time.Parse(time.RFC3339Nano, strings.ToUpper(v)); err != nil {
				return fmt.Errorf("not an RFC 3339 date-time: %w", err)
			}
			return nil
		}))
	})
}

// NewAPI parses and validates an OpenAPI 3.1 document (YAML or JSON).
func NewAPI(raw []byte) (*API, error) {
	defineRFC3339()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi %q: want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	for _, name := range []string{noSuchRoute, methodNotAllowed} {
		if doc.Components == nil || doc.Components.Responses[name] == nil {
			return nil, fmt.Errorf("components.responses.%s is missing", name)
		}
	}
	// Routes match on method and path only: the listener's address is configuration.
	routed := *doc
	routed.Servers = nil
	r, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &API{Doc: doc, router: r, seen: map[string]bool{}}, nil
}

// Exchange is one real request and the answer it got.
type Exchange struct {
	Request *http.Request // as sent; its body is Body (Request.Body is not read again)
	Body    []byte        // the request body
	Status  int
	Header  http.Header
	Answer  []byte // the response body
}

// Do sends req (with body) through client and returns the exchange.
func Do(client *http.Client, req *http.Request, body []byte) (Exchange, error) {
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	resp, err := client.Do(req)
	if err != nil {
		return Exchange{}, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return Exchange{}, err
	}
	return Exchange{Request: req, Body: body, Status: resp.StatusCode, Header: resp.Header, Answer: answer}, nil
}

func (x Exchange) request() *http.Request {
	r := x.Request.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(x.Body))
	r.ContentLength = int64(len(x.Body))
	return r
}

// route finds the operation of the exchange's request, or, for a request the document
// has no operation for, a stand-in operation whose only answer is the listener's routing
// error (404 NoSuchRoute, 405 MethodNotAllowed).
func (a *API) route(r *http.Request) (*routers.Route, map[string]string, string, error) {
	route, params, err := a.router.FindRoute(r)
	var fallback string
	switch {
	case err == nil:
		return route, params, r.Method + " " + route.Path, nil
	case errors.Is(err, routers.ErrPathNotFound):
		fallback = noSuchRoute
	case errors.Is(err, routers.ErrMethodNotAllowed):
		fallback = methodNotAllowed
	default:
		return nil, nil, "", err
	}
	code := http.StatusNotFound
	if fallback == methodNotAllowed {
		code = http.StatusMethodNotAllowed
	}
	op := openapi3.NewOperation()
	op.Responses = openapi3.NewResponses(openapi3.WithStatus(code, a.Doc.Components.Responses[fallback]))
	return &routers.Route{Spec: a.Doc, Path: r.URL.Path, PathItem: &openapi3.PathItem{}, Method: r.Method, Operation: op},
		nil, "unrouted " + fallback, nil
}

// CheckAnswer validates a real answer: its status must be documented for the operation
// (or be the listener's routing error), and its required headers, content type and body
// must be what the document says. It records the answer as seen.
func (a *API) CheckAnswer(x Exchange) error {
	route, params, key, err := a.route(x.Request)
	if err != nil {
		return fmt.Errorf("%s %s: %w", x.Request.Method, x.Request.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: x.request(), PathParams: params, Route: route},
		Status:                 x.Status,
		Header:                 x.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(x.Answer)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s answered %d %.300q (%s): %w", x.Request.Method, x.Request.URL.Path, x.Status, x.Answer,
			x.Header.Get("Content-Type"), err)
	}
	// kin-openapi lets any body through for a response documented without content.
	if resp := route.Operation.Responses.Status(x.Status); resp != nil && len(resp.Value.Content) == 0 && len(x.Answer) > 0 {
		return fmt.Errorf("%s %s answered %d with a body the document does not describe", x.Request.Method, x.Request.URL.Path, x.Status)
	}
	a.mu.Lock()
	a.seen[key+" "+strconv.Itoa(x.Status)] = true
	a.mu.Unlock()
	return nil
}

// CheckRequest validates a real request against the document: nil means a client that
// follows the document could have sent it. A bearer credential is taken as given (the
// document cannot tell a valid token from a forged one).
func (a *API) CheckRequest(x Exchange) error {
	route, params, key, err := a.route(x.Request)
	if err != nil {
		return err
	}
	if strings.HasPrefix(key, "unrouted ") {
		return fmt.Errorf("%s %s: the document has no such operation", x.Request.Method, x.Request.URL.Path)
	}
	in := &openapi3filter.RequestValidationInput{Request: x.request(), PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearerPresent}}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s == nil || s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return fmt.Errorf("security scheme %s is not http bearer", in.SecuritySchemeName)
	}
	tok, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return errors.New("no bearer credential")
	}
	return nil
}

// Documented lists every answer the document promises, as "METHOD /path STATUS", plus
// the listener's routing errors ("unrouted NoSuchRoute 404", "unrouted MethodNotAllowed 405").
func (a *API) Documented() []string {
	out := []string{"unrouted " + noSuchRoute + " 404", "unrouted " + methodNotAllowed + " 405"}
	for path, item := range a.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				out = append(out, method+" "+path+" "+status)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Unseen returns the documented answers no CheckAnswer has seen, except those in exempt
// (answer → why a test cannot produce it); an exemption for an answer that was seen, or
// that is not documented, is reported too, so exemptions cannot outlive their reason.
func (a *API) Unseen(exempt map[string]string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	documented := map[string]bool{}
	for _, k := range a.Documented() {
		documented[k] = true
		if _, ok := exempt[k]; !a.seen[k] && !ok {
			out = append(out, k)
		}
	}
	for k := range exempt {
		switch {
		case !documented[k]:
			out = append(out, k+" (exempt, but not documented)")
		case a.seen[k]:
			out = append(out, k+" (exempt, but seen)")
		}
	}
	slices.Sort(out)
	return out
}
