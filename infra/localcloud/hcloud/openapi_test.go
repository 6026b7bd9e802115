package hcloud

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/relayfleet/relayfleet/infra/localcloud/apicheck"
)

var (
	specOnce sync.Once
	specDoc  *openapi3.T
	specErr  error
)

// specPath is Hetzner's API description (testdata/SOURCE).
const specPath = "testdata/hcloud.openapi.json"

// newValidator checks exchanges with the API served at base (the test
// server's URL with /v1) against the description, loaded once.
func newValidator(t *testing.T, base string) *apicheck.Checker {
	t.Helper()
	specOnce.Do(func() { specDoc, specErr = apicheck.Load(specPath) })
	if specErr != nil {
		t.Fatal(specErr)
	}
	c, err := apicheck.New(specDoc, base)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
		{"status not in the enum", get, 200, `{"server": ` + strings.Replace(goodServer(t), `"status":"running"`, `"status":"exploded"`, 1) + `}`, "/server/status"},
		{"id missing", get, 200, `{"server": ` + strings.Replace(goodServer(t), `"id":42,`, ``, 1) + `}`, "id"},
		{"list without meta", list, 200, `{"servers": []}`, "meta"},
		{"error without code", get, 404, `{"error": {"message": "nope"}}`, "code"},
		{"created for a get", get, 201, `{}`, "201"},
	} {
		err := v.Check(tc.req, nil, tc.code, json, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	// And the same server, right, passes.
	if err := v.Check(get, nil, 200, json, []byte(`{"server": `+goodServer(t)+`}`)); err != nil {
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
