package apicheck

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheck: against Hetzner's description, a right answer passes, and a
// wrong one, an unlisted status, an error answer without its code and an
// unknown route fail; Wrap records what fails.
func TestCheck(t *testing.T) {
	doc, err := Load("../hcloud/testdata/hcloud.openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(doc, "http://api.test/v1")
	if err != nil {
		t.Fatal(err)
	}
	json := http.Header{"Content-Type": {"application/json"}}
	req := httptest.NewRequest("GET", "http://api.test/v1/actions/7", nil)
	action := `{"action":{"id":7,"command":"create_server","status":"running","progress":0,"started":"2026-12-01T00:00:00Z","finished":null,"resources":[],"error":null}}`
	if err := c.Check(req, nil, 200, json, []byte(action)); err != nil {
		t.Errorf("right answer: %v", err)
	}
	for name, tc := range map[string]struct {
		code int
		body string
	}{
		"status enum":   {200, strings.Replace(action, `"running"`, `"busy"`, 1)},
		"missing field": {200, strings.Replace(action, `"progress":0,`, ``, 1)},
		"unlisted code": {302, `{}`},
		"error no code": {404, `{"error":{"message":"x","details":null}}`},
	} {
		if err := c.Check(req, nil, tc.code, json, []byte(tc.body)); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
	if err := c.Check(httptest.NewRequest("GET", "http://api.test/v1/nothing", nil), nil, 200, json, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "not in the API description") {
		t.Errorf("unknown route: %v", err)
	}
	h := c.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"action":{}}`))
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://api.test/v1/actions/7", nil))
	if rec.Code != 200 || rec.Body.String() != `{"action":{}}` || len(c.Failures()) != 1 || c.Seen("GET /actions/{id}") != 6 || c.Checked() != 7 || strings.Contains(c.Failures()[0], "\n") {
		t.Errorf("wrap: %d %q, failures %q", rec.Code, rec.Body, c.Failures())
	}
}

// TestLoadBundled: DigitalOcean's description, written as many files,
// loads as one document with only the kept paths; a right answer passes,
// a wrong one and a path left out fail.
func TestLoadBundled(t *testing.T) {
	doc, err := LoadBundled("../digitalocean/testdata/openapi/DigitalOcean-public.v2.yaml", []string{"/v2/actions"})
	if err != nil {
		t.Fatal(err)
	}
	if doc.Paths.Find("/v2/actions/{action_id}") == nil || doc.Paths.Find("/v2/droplets") != nil {
		t.Fatalf("paths kept: %v", doc.Paths.InMatchingOrder())
	}
	c, err := New(doc, "http://api.test")
	if err != nil {
		t.Fatal(err)
	}
	json := http.Header{"Content-Type": {"application/json"}}
	action := `{"action":{"id":7,"status":"in-progress","type":"create","started_at":"2026-12-01T00:00:00Z","completed_at":null,"resource_id":3,"resource_type":"droplet","region_slug":"fra1"}}`
	req := httptest.NewRequest("GET", "http://api.test/v2/actions/7", nil)
	if err := c.Check(req, nil, 200, json, []byte(action)); err != nil {
		t.Errorf("right answer: %v", err)
	}
	if err := c.Check(req, nil, 200, json, []byte(strings.Replace(action, `"id":7`, `"id":"seven"`, 1))); err == nil {
		t.Error("an action with a string id passed")
	}
	req = httptest.NewRequest("GET", "http://api.test/v2/droplets", nil)
	if err := c.Check(req, nil, 200, json, []byte(`{"droplets":[]}`)); err == nil || !strings.Contains(err.Error(), "not in the API description") {
		t.Errorf("a path left out: %v", err)
	}
}
