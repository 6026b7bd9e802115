package digitalocean

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/relayfleet/relayfleet/infra/localcloud/apicheck"
)

// specRoot is DigitalOcean's published API description, vendored whole
// (testdata/openapi/SOURCE says from where and when).
const specRoot = "testdata/openapi/DigitalOcean-public.v2.yaml"

// specFamilies are the API's parts the local cloud serves: the paths under
// them are kept, the others (databases, apps, ...) left out, so that a
// request elsewhere finds no route and fails validation.
var specFamilies = []string{"/v2/droplets", "/v2/actions", "/v2/tags", "/v2/firewalls", "/v2/sizes", "/v2/account/keys"}

var spec struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

// loadSpec reads the vendored description once: every path it describes,
// every $ref resolved, checked by kin-openapi.
func loadSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	spec.once.Do(func() {
		spec.err = func() error {
			doc, err := apicheck.LoadBundled(specRoot, specFamilies)
			if err != nil {
				return err
			}
			router, err := legacy.NewRouter(doc)
			if err != nil {
				return err
			}
			spec.doc, spec.router = doc, router
			return nil
		}()
	})
	if spec.err != nil {
		t.Fatalf("%s: %v", specRoot, spec.err)
	}
	return spec.doc, spec.router
}

func TestSpecLoads(t *testing.T) {
	doc, _ := loadSpec(t)
	t.Log(doc.Paths.Len())
}

// validator checks every request that reaches the handler it wraps, and
// every response the handler writes, against the vendored description.
// It counts the operations it saw so that a test can say which it
// covered. With t set, each finding fails the test; without, findings
// are only kept (the tests that show the validator catches faults).
type validator struct {
	t      testing.TB
	router routers.Router
	// lenientRequests keeps request findings without failing the test:
	// for tests that send bad input on purpose (responses stay strict).
	lenientRequests bool

	mu       sync.Mutex
	findings []string
	ops      map[string]int // "METHOD /v2/path/{param} STATUS"
}

func newValidator(t testing.TB, strict bool) *validator {
	_, router := loadSpec(t)
	v := &validator{router: router, ops: map[string]int{}}
	if strict {
		v.t = t
	}
	return v
}

func (v *validator) report(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	v.findings = append(v.findings, msg)
	if v.t != nil && !(v.lenientRequests && strings.HasPrefix(msg, "request ")) {
		v.t.Errorf("OpenAPI: %s", msg)
	}
}

// brief is a validation error without the schemas and values kin-openapi
// dumps into it.
func brief(err error) string {
	var out []string
	skip := false
	for _, l := range strings.Split(err.Error(), "\n") {
		t := strings.TrimSpace(l)
		if t == "Schema:" || t == "Value:" {
			skip = true
			continue
		}
		if skip && strings.HasPrefix(l, "  ") {
			continue
		}
		skip = false
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func (v *validator) Findings() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.findings)
}

func (v *validator) Ops() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.ops)
}

// bearer is the description's bearer_auth: an Authorization header with a
// bearer token (which token is the server's business).
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "bearer_auth" {
		return fmt.Errorf("security scheme %s: not DigitalOcean's bearer_auth", in.SecuritySchemeName)
	}
	tok, found := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !found || tok == "" {
		return errors.New("no bearer token in the Authorization header")
	}
	return nil
}

func (v *validator) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		what := r.Method + " " + r.URL.RequestURI()
		route, params, err := v.router.FindRoute(r)
		if err != nil {
			v.report("%s: no operation in the description: %v", what, err)
			h.ServeHTTP(w, r)
			return
		}
		opts := &openapi3filter.Options{AuthenticationFunc: bearer, IncludeResponseStatus: true, MultiError: true}
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			v.report("request %s: %s", what, brief(err))
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: opts,
		}
		if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
			v.report("response %d to %s: %s\n%s", rec.Code, what, brief(err), rec.Body.Bytes())
		}
		v.mu.Lock()
		v.ops[fmt.Sprintf("%s %s %d", r.Method, route.Path, rec.Code)]++
		v.mu.Unlock()
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}
