package digitalocean

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"gopkg.in/yaml.v3"
)

// specRoot is DigitalOcean's published API description, vendored whole
// (testdata/openapi/SOURCE says from where and when).
const specRoot = "testdata/openapi/DigitalOcean-public.v2.yaml"

// bundler bundles DigitalOcean's description. DigitalOcean writes it as
// many files, and $refs whole operations and tag descriptions into the
// root, which OpenAPI 3.0 does not allow (their tooling bundles it before
// publishing). bundle does the
// same: it inlines every $ref, files and JSON pointers alike, so that
// kin-openapi reads one plain document. Nothing else is changed, except
// that what only documents (the root's tags, x-codeSamples, a media
// type's named examples) is left out.
//
// A schema that contains itself (DigitalOcean has a few) is inlined down
// to where it recurs, which refers to one copy kept in
// components.schemas.
type bundler struct {
	files  map[string]any
	stack  []string
	cyclic map[string]string // file#pointer -> its components.schemas name
	saved  map[string]any    // components.schemas name -> the schema
}

func (b *bundler) file(path string) (any, error) {
	if v, ok := b.files[path]; ok {
		return v, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b.files[path] = v
	return v, nil
}

// pointer follows a JSON pointer ("/a/b~1c") in v.
func pointer(v any, ptr string) (any, error) {
	if ptr == "" || ptr == "/" {
		return v, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("pointer %s: %q is not in an object", ptr, tok)
		}
		if v, ok = m[tok]; !ok {
			return nil, fmt.Errorf("pointer %s: no %q", ptr, tok)
		}
	}
	return v, nil
}

func (b *bundler) resolve(v any, file string) (any, error) {
	switch n := v.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			target, ptr, _ := strings.Cut(ref, "#")
			target = filepath.Join(filepath.Dir(file), target)
			if ref[0] == '#' {
				target = file
			}
			key := target + "#" + ptr
			if slices.Contains(b.stack, key) {
				name, ok := b.cyclic[key]
				if !ok {
					name = fmt.Sprintf("cyclic%d_%s", len(b.cyclic), componentName(filepath.Base(key)))
					b.cyclic[key] = name
				}
				return map[string]any{"$ref": "#/components/schemas/" + name}, nil
			}
			root, err := b.file(target)
			if err != nil {
				return nil, err
			}
			t, err := pointer(root, ptr)
			if err != nil {
				return nil, fmt.Errorf("%s: $ref %s: %w", file, ref, err)
			}
			b.stack = append(b.stack, key)
			r, err := b.resolve(t, target)
			b.stack = b.stack[:len(b.stack)-1]
			if name, ok := b.cyclic[key]; ok && err == nil && b.saved[name] == nil {
				b.saved[name] = r
			}
			return r, err
		}
		out := make(map[string]any, len(n))
		if all, isList := n["allOf"].([]any); isList {
			// DigitalOcean documents a $ref'd property with a second allOf
			// member that holds only a description (and an example). That
			// member constrains nothing, yet under OpenAPI 3.0 it refuses
			// null (it lacks nullable) even where the first allows it
			// (next_backup_window, tags): leave it out, as their intent is.
			n = maps.Clone(n)
			n["allOf"] = slices.DeleteFunc(slices.Clone(all), func(m any) bool {
				mm, isMap := m.(map[string]any)
				if !isMap || mm["description"] == nil {
					return false
				}
				for k := range mm {
					if k != "description" && k != "example" {
						return false
					}
				}
				return true
			})
		}
		for _, k := range slices.Sorted(maps.Keys(n)) {
			if k == "x-codeSamples" || (k == "examples" && n["schema"] != nil) {
				continue
			}
			if d, ok := n[k].(map[string]any); ok && k == "discriminator" && d["mapping"] != nil {
				// A mapping names schemas by reference: each becomes a
				// component, named after its file and pointer.
				d = maps.Clone(d)
				mapping := map[string]any{}
				for v, ref := range d["mapping"].(map[string]any) {
					r, err := b.resolve(map[string]any{"$ref": ref}, file)
					if err != nil {
						return nil, err
					}
					name := componentName(fmt.Sprint(ref))
					b.saved[name] = r
					mapping[v] = "#/components/schemas/" + name
				}
				d["mapping"] = mapping
				out[k] = d
				continue
			}
			r, err := b.resolve(n[k], file)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case map[any]any:
		m := make(map[string]any, len(n))
		for k, x := range n {
			m[fmt.Sprint(k)] = x
		}
		return b.resolve(m, file)
	case []any:
		out := make([]any, len(n))
		for i, x := range n {
			r, err := b.resolve(x, file)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// specFamilies are the API's parts the local cloud serves: the paths under
// them are kept, the others (databases, apps, ...) left out, so that a
// request elsewhere finds no route and fails validation.
var specFamilies = []string{"/v2/droplets", "/v2/actions", "/v2/tags", "/v2/firewalls", "/v2/sizes", "/v2/account/keys"}

func componentName(ref string) string {
	return strings.NewReplacer("#", "_", "/", "_", ".", "_").Replace(strings.TrimPrefix(ref, "./"))
}

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
			b := &bundler{files: map[string]any{}, cyclic: map[string]string{}, saved: map[string]any{}}
			root, err := b.file(specRoot)
			if err != nil {
				return err
			}
			r := maps.Clone(root.(map[string]any))
			delete(r, "tags")
			paths := map[string]any{}
			for p, item := range r["paths"].(map[string]any) {
				if slices.ContainsFunc(specFamilies, func(f string) bool { return p == f || strings.HasPrefix(p, f+"/") }) {
					paths[p] = item
				}
			}
			r["paths"] = paths
			resolved, err := b.resolve(r, specRoot)
			if err != nil {
				return err
			}
			comps := resolved.(map[string]any)["components"].(map[string]any)
			schemas, _ := comps["schemas"].(map[string]any)
			if schemas == nil {
				schemas = map[string]any{}
				comps["schemas"] = schemas
			}
			for name, s := range b.saved {
				schemas[name] = s
			}
			data, err := json.Marshal(resolved)
			if err != nil {
				return err
			}
			l := openapi3.NewLoader()
			doc, err := l.LoadFromDataWithPath(data, &url.URL{Path: specRoot})
			if err != nil {
				return err
			}
			if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
				return fmt.Errorf("the description does not validate: %w", err)
			}
			// Match paths on any host: the tests' servers are httptest's.
			doc.Servers = nil
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
