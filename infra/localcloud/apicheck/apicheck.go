// Package apicheck checks HTTP exchanges against a provider's published
// OpenAPI description (kin-openapi): the local cloud's tests put it in
// front of an API server so that every request a real client sends and
// every answer the server gives is validated.
package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Load reads an OpenAPI document and makes it checkable under any base
// URL: path-level servers are dropped (Check uses the one given to New),
// and status ranges written in lower case ("4xx") are renamed to
// OpenAPI's "4XX", the only form kin-openapi matches (without this, error
// answers would go unchecked).
func Load(path string) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %w", path, err)
	}
	normalize(doc)
	return doc, nil
}

// normalize drops doc's path-level servers and renames its lower-case
// status ranges ("4xx") to upper case.
func normalize(doc *openapi3.T) {
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
		for _, op := range item.Operations() {
			for code, r := range op.Responses.Map() {
				if len(code) == 3 && strings.HasSuffix(code, "xx") {
					op.Responses.Delete(code)
					op.Responses.Set(strings.ToUpper(code), r)
				}
			}
		}
	}
}

// Checker validates exchanges with an API served under one base URL.
type Checker struct {
	router  routers.Router
	mu      sync.Mutex
	errs    []string
	seen    map[string]int // "METHOD /route" -> count
	checked int            // exchanges checked
}

// New returns a Checker for doc (from Load) served at base, e.g.
// "http://127.0.0.1:8780/v1". It does not change doc.
func New(doc *openapi3.T, base string) (*Checker, error) {
	d := *doc
	d.Servers = openapi3.Servers{{URL: base}}
	r, err := gorillamux.NewRouter(&d)
	if err != nil {
		return nil, err
	}
	return &Checker{router: r, seen: map[string]int{}}, nil
}

var options = &openapi3filter.Options{
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	MultiError:            true, // every schema error, not only the first
	IncludeResponseStatus: true, // a status the operation does not list is an error
	// Errors without the schema and value dumps: one readable line each.
	SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()},
}

// Check validates one exchange and returns what is wrong, or nil.
func (c *Checker) Check(req *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) error {
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	c.mu.Lock()
	c.checked++
	c.mu.Unlock()
	route, params, err := c.router.FindRoute(r)
	if err != nil {
		return fmt.Errorf("%s %s: not in the API description: %v", req.Method, req.URL.Path, err)
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path]++
	c.mu.Unlock()
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: options}
	var errs []string
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: options,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		errs = append(errs, fmt.Sprintf("response %d: %v", status, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s %s: %s", req.Method, req.URL.RequestURI(), strings.Join(strings.Fields(strings.Join(errs, "; ")), " "))
	}
	return nil
}

// Wrap serves h and checks every exchange; Failures lists what failed.
// The request URL h sees is the one Check matches against base, so wrap
// the handler that receives the full path (before any StripPrefix).
func (c *Checker) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := c.Check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			c.mu.Lock()
			c.errs = append(c.errs, err.Error())
			c.mu.Unlock()
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// Failures are the exchanges Wrap found wrong, one line each.
func (c *Checker) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// Checked is how many exchanges were checked, passed and failed alike.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

// Seen is how often each route ("METHOD /path/{id}") was checked.
func (c *Checker) Seen(route string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[route]
}
