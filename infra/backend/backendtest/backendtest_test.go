package backendtest

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestAPI: a fault is served once, in place of the request or (After)
// after it, with its fixture, status and header; the log has every
// request, and Writes leaves out the GETs.
func TestAPI(t *testing.T) {
	served := 0
	a := &API{T: t, Token: "tok", Serve: func(w http.ResponseWriter, r *http.Request, body []byte) {
		served++
		Reply(w, http.StatusOK, map[string]any{"body": string(body)})
	}}
	srv := NewServer(t, a)
	do := func(method, path string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	a.AddFault(Fault{Method: "GET", Path: "/boxes/1", Status: 503, Fixture: "error.json", Header: http.Header{"Retry-After": {"7"}}})
	a.AddFault(Fault{Method: "POST", Path: "/boxes", Status: 500, Fixture: "error.json", After: true})

	if code, body, h := do("GET", "/boxes/1?x=1"); code != 503 || !strings.Contains(body, "unavailable") || h.Get("Retry-After") != "7" || served != 0 {
		t.Errorf("fault: %d %q %v, served %d", code, body, h, served)
	}
	if code, body, _ := do("GET", "/boxes/1"); code != 200 || !strings.Contains(body, `"x"`) || served != 1 {
		t.Errorf("after the fault: %d %q, served %d", code, body, served)
	}
	if code, _, _ := do("POST", "/boxes"); code != 500 || served != 2 {
		t.Errorf("After fault: %d, served %d; want 500 and the request served", code, served)
	}
	if n := a.FaultsLeft(); n != 0 {
		t.Errorf("%d faults left", n)
	}
	if got, want := a.Requests("GET "), []string{"GET /boxes/1?x=1", "GET /boxes/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Requests = %q, want %q", got, want)
	}
	if got, want := a.Writes(), []string{"POST /boxes"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Writes = %q, want %q", got, want)
	}
	if o := a.Object("error.json"); o["error"] == nil {
		t.Errorf("Object = %v", o)
	}
}

func TestKeys(t *testing.T) {
	hostKey, admin := Keys(t)
	if _, err := ssh.ParsePrivateKey(hostKey); err != nil {
		t.Errorf("host key: %v", err)
	}
	if _, comment, _, _, err := ssh.ParseAuthorizedKey([]byte(admin)); err != nil || comment != "admin@example" {
		t.Errorf("admin key %q: %v, comment %q", admin, err, comment)
	}
	h2, a2 := Keys(t)
	if string(h2) == string(hostKey) || a2 == admin {
		t.Error("Keys returned the same keys twice")
	}
}
