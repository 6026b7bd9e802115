package hcloud

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// spec is Hetzner's API description (testdata/SOURCE), loaded once.
func spec(t *testing.T) *openapi3.T {
	t.Helper()
	specOnce.Do(func() {
		l := openapi3.NewLoader()
		specDoc, specErr = l.LoadFromFile("testdata/hcloud.openapi.json")
		if specErr != nil {
			return
		}
		// Paths carry their own server (the cloud API's or the Hetzner
		// API's); the tests serve all of them under one base instead.
		for _, item := range specDoc.Paths.Map() {
			item.Servers = nil
			// The description writes status ranges in lower case
			// ("4xx"); OpenAPI's are "4XX", the only form kin-openapi
			// matches: without this, error answers would go unchecked.
			for _, op := range item.Operations() {
				for code, r := range op.Responses.Map() {
					if len(code) == 3 && strings.HasSuffix(code, "xx") {
						op.Responses.Delete(code)
						op.Responses.Set(strings.ToUpper(code), r)
					}
				}
			}
		}
	})
	if specErr != nil {
		t.Fatal(specErr)
	}
	return specDoc
}

// validator checks requests and responses against the API description,
// under base (the test server's URL with /v1).
type validator struct {
	router routers.Router
	mu     sync.Mutex
	errs   []string
	seen   map[string]int // "METHOD route" -> count
}

func newValidator(t *testing.T, base string) *validator {
	t.Helper()
	doc := *spec(t)
	doc.Servers = openapi3.Servers{{URL: base}}
	r, err := gorillamux.NewRouter(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return &validator{router: r, seen: map[string]int{}}
}

var filterOpts = &openapi3filter.Options{
	AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	// Report every schema error, not only the first.
	MultiError: true,
	// A status the operation does not list is an error.
	IncludeResponseStatus: true,
}

// check validates one exchange; it returns what is wrong, or nil.
func (v *validator) check(req *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) error {
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := v.router.FindRoute(r)
	if err != nil {
		return fmt.Errorf("%s %s: not in the API description: %v", req.Method, req.URL.Path, err)
	}
	v.mu.Lock()
	v.seen[req.Method+" "+route.Path]++
	v.mu.Unlock()
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: filterOpts}
	var errs []string
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		errs = append(errs, "request: "+err.Error())
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: filterOpts,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		errs = append(errs, fmt.Sprintf("response %d: %v", status, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s %s: %s", req.Method, req.URL.RequestURI(), strings.Join(errs, "; "))
	}
	return nil
}

// wrap serves h and checks every exchange.
func (v *validator) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := v.check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			v.mu.Lock()
			v.errs = append(v.errs, err.Error())
			v.mu.Unlock()
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

func (v *validator) failures() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// TestOpenAPIValidatorCatchesWrongResponses shows the validation can fail:
// answers that break the description in ways a client would notice are
// reported.
func TestOpenAPIValidatorCatchesWrongResponses(t *testing.T) {
	v := newValidator(t, "http://api.test/v1")
	get := httptest.NewRequest(http.MethodGet, "http://api.test/v1/servers/42", nil)
	list := httptest.NewRequest(http.MethodGet, "http://api.test/v1/servers?label_selector=fleet%3Dx", nil)
	json := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name string
		req  *http.Request
		code int
		body string
		want string
	}{
		{"status not in the enum", get, 200, `{"server": ` + strings.Replace(goodServer(t), `"status":"running"`, `"status":"exploded"`, 1) + `}`, "exploded"},
		{"id missing", get, 200, `{"server": ` + strings.Replace(goodServer(t), `"id":42,`, ``, 1) + `}`, "id"},
		{"list without meta", list, 200, `{"servers": []}`, "meta"},
		{"error without code", get, 404, `{"error": {"message": "nope"}}`, "code"},
		{"created for a get", get, 201, `{}`, "201"},
	} {
		err := v.check(tc.req, nil, tc.code, json, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	// And the same server, right, passes.
	if err := v.check(get, nil, 200, json, []byte(`{"server": `+goodServer(t)+`}`)); err != nil {
		t.Errorf("a right answer: %v", err)
	}
}

// goodServer is a server as this package renders it, as compact JSON.
func goodServer(t *testing.T) string {
	t.Helper()
	s, _ := newTestServer(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	srv := &server{ID: 42, Name: "a", Status: "running", ServerType: "cx23", Location: "fsn1", Image: "debian-12", IPv4: "192.0.2.1"}
	return compact(t, s.serverJSON(srv))
}
