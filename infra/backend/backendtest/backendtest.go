// Package backendtest holds what the cloud backends' tests share: the
// common half of a fake cloud API (a request log, faults served once in
// place of a request, the token check, JSON fixtures from testdata), keys
// for a box spec, and the tests that hold for every backend.Backend, run
// by each cloud's package with what differs between the clouds. Only
// _test.go files import it.
package backendtest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// Fault is an answer the fake gives, once, instead of serving a request
// whose method and path match.
type Fault struct {
	Method, Path string // Path without the query
	Status       int
	Fixture      string // testdata file with the body
	Header       http.Header
	After        bool // serve the request first (it takes effect), then answer with the fault
}

// API is the part of a fake cloud API that does not depend on the cloud.
// A cloud's fake embeds it and sets Serve; API's ServeHTTP checks the
// token, logs the request, answers with a matching Fault if there is one
// and otherwise calls Serve, all with Mu held.
type API struct {
	T     *testing.T
	Token string // every request must carry "Authorization: Bearer Token", and the token nowhere else
	// Serve answers a request the cloud's way; body is the request's body.
	// It runs with Mu held.
	Serve func(w http.ResponseWriter, r *http.Request, body []byte)

	Mu     sync.Mutex // guards Faults, Log and the embedding fake's state
	Faults []Fault    // not yet served
	Log    []string   // "METHOD /path?query" of every request
}

// Action is an action of a fake cloud (a create, a start, a delete) that
// finishes after some polls: its JSON object as the API shows it, the
// polls it had, and what finishing it does to the fake's state.
type Action struct {
	Obj    map[string]any
	Polls  int
	OnDone func()
}

// Finish sets fields of the action's object (its status, when it
// finished) and runs OnDone.
func (a *Action) Finish(fields map[string]any) {
	maps.Copy(a.Obj, fields)
	if a.OnDone != nil {
		a.OnDone()
	}
}

// Poll counts a poll of the action: one whose status is running finishes
// at its second poll, with fields.
func (a *Action) Poll(running string, fields map[string]any) {
	if a.Polls++; a.Polls > 1 && a.Obj["status"] == running {
		a.Finish(fields)
	}
}

// Start makes a the fake API of token that answers with serve, and starts
// its server, closed when the test ends.
func (a *API) Start(t *testing.T, token string, serve func(w http.ResponseWriter, r *http.Request, body []byte)) *httptest.Server {
	a.T, a.Token, a.Serve = t, token, serve
	return NewServer(t, a)
}

// NewServer starts an httptest server for h, closed when the test ends.
func NewServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// ServeHTTP is the fake's handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if got := r.Header.Get("Authorization"); got != "Bearer "+a.Token {
		a.T.Errorf("%s %s: Authorization %q", r.Method, r.URL, got)
	}
	if strings.Contains(r.URL.String(), a.Token) || strings.Contains(string(body), a.Token) {
		a.T.Errorf("%s %s: token in the URL or body", r.Method, r.URL)
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.Log = append(a.Log, r.Method+" "+r.URL.RequestURI())
	for i, fl := range a.Faults {
		if fl.Method == r.Method && fl.Path == r.URL.Path {
			a.Faults = slices.Delete(a.Faults, i, i+1)
			if fl.After {
				a.Serve(httptest.NewRecorder(), r, body)
			}
			for k, v := range fl.Header {
				w.Header()[k] = v
			}
			a.Fail(w, fl.Status, fl.Fixture)
			return
		}
	}
	a.Serve(w, r, body)
}

// AddFault queues fl.
func (a *API) AddFault(fl Fault) {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.Faults = append(a.Faults, fl)
}

// FaultsLeft is the number of faults not yet served.
func (a *API) FaultsLeft() int {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return len(a.Faults)
}

// Requests returns the log entries that start with prefix ("POST /servers").
func (a *API) Requests(prefix string) []string {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	var out []string
	for _, l := range a.Log {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Writes returns the log entries of every request but GETs.
func (a *API) Writes() []string {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	var out []string
	for _, l := range a.Log {
		if !strings.HasPrefix(l, "GET ") {
			out = append(out, l)
		}
	}
	return out
}

// Object is the JSON object in testdata/name, fresh on each call.
func (a *API) Object(name string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(Fixture(a.T, name), &m); err != nil {
		a.T.Fatal(err)
	}
	return m
}

// Decode decodes body, the JSON body of request r, into v; a body that
// does not decode fails the test, naming the request.
func (a *API) Decode(r *http.Request, body []byte, v any) {
	if err := json.Unmarshal(body, v); err != nil {
		a.T.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
	}
}

// Fail answers with status and the body in testdata/name.
func (a *API) Fail(w http.ResponseWriter, status int, name string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(Fixture(a.T, name))
}

// Fixture is the content of testdata/name in the test's package.
func Fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Reply answers with status and v as JSON.
func Reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Ctx is a context that ends after 20 s or with the test.
func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// FastRetry keeps retry tests quick; the backoff is still real.
var FastRetry = backend.Retry{Attempts: 4, Base: time.Millisecond, Max: 10 * time.Millisecond}

// Spec is a valid spec of a box called name, of shape at location, with
// labels and fresh Keys.
func Spec(t *testing.T, name, shape, location string, labels map[string]string) backend.Spec {
	t.Helper()
	hostKey, admin := Keys(t)
	return backend.Spec{
		Name: name, Shape: shape, Location: location, Labels: labels,
		HostKey: hostKey, AuthorizedKeys: []string{admin},
	}
}

// Keys returns a fresh host private key (OpenSSH PEM) and an admin
// authorized_keys line.
func Keys(t *testing.T) (hostKey []byte, admin string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " admin@example"
}

// CheckError checks an error a backend returned for a call against a fake:
// it is want to the letter, one line, without the token, every queued
// fault was served, and, when sent is not 0, the fake saw sent requests.
func CheckError(t *testing.T, a *API, err error, want string, sent int) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if err.Error() != want {
		t.Errorf("error\n got %q\nwant %q", err, want)
	}
	if strings.ContainsAny(err.Error(), "\n") || strings.Contains(err.Error(), a.Token) {
		t.Errorf("error not one line or shows the token: %q", err)
	}
	if n := a.FaultsLeft(); n != 0 {
		t.Errorf("faults not hit (not retried as often as expected): %d left", n)
	}
	if n := len(a.Requests("")); sent != 0 && n != sent {
		t.Errorf("%d requests, want %d", n, sent)
	}
}
