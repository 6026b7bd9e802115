package testutil

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestSeaweedFSVersionIsTheToolsModule: the cached build StartSeaweedFS
// looks for is the one make seaweedfs builds.
func TestSeaweedFSVersionIsTheToolsModule(t *testing.T) {
	data, err := os.ReadFile("../../tools/seaweedfs/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/seaweedfs/seaweedfs " + SeaweedFSVersion; !strings.Contains(string(data), want) {
		t.Errorf("tools/seaweedfs/go.mod does not require %s", want)
	}
}

// TestSeaweedFSStore: the store starts on loopback, makes a bucket, and
// admits only its identity.
func TestSeaweedFSStore(t *testing.T) {
	Short(t, "make test-s3")
	s := StartSeaweedFS(t)
	s.MakeBucket(t, "relayfleet")
	if code, err := s.request(http.MethodPut, "/relayfleet/hello", "hi"); err != nil || code != http.StatusOK {
		t.Fatalf("signed PUT: %d %v", code, err)
	}
	resp, err := http.Get("http://" + s.Endpoint + "/relayfleet/hello")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an unsigned GET: %d, want 403 (the store admits only its identity)", resp.StatusCode)
	}
	if !strings.HasPrefix(s.Backend("relayfleet", "p"), "s3://relayfleet/p?endpoint=127.0.0.1:") {
		t.Errorf("backend URL %s", s.Backend("relayfleet", "p"))
	}
}

// TestSeaweedFSRestart: an object written before the server was killed
// (SIGKILL) is there after Restart on the same data dir and ports, and
// while it is down a request fails.
func TestSeaweedFSRestart(t *testing.T) {
	Short(t, "make test-s3")
	s := StartSeaweedFS(t)
	s.MakeBucket(t, "relayfleet")
	if code, err := s.request(http.MethodPut, "/relayfleet/kept", "written before the kill"); err != nil || code != http.StatusOK {
		t.Fatalf("signed PUT: %d %v", code, err)
	}
	s.Proc.Kill()
	if code, err := s.request(http.MethodGet, "/relayfleet/kept", ""); err == nil {
		t.Fatalf("a GET while the store is killed answered %d", code)
	}
	s.Restart(t)
	if code, err := s.request(http.MethodGet, "/relayfleet/kept", ""); err != nil || code != http.StatusOK {
		t.Fatalf("the object written before the kill, after the restart: %d %v", code, err)
	}
}
