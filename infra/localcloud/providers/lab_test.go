package providers

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestCheckName(t *testing.T) {
	for _, name := range Names() {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%s): %v", name, err)
		}
	}
	var ue *cli.UsageError
	if err := CheckName("aws"); !errors.As(err, &ue) || err.Error() != `unknown provider "aws": want digitalocean or hcloud or digitalocean` {
		t.Errorf("CheckName(aws) = %v", err)
	}
}

func TestServeLabBadInput(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad-faults.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "rate_limited": {"requests": 2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	user := lab.Options{Dir: dir, Geteuid: func() int { return 1000 }}
	root := lab.Options{Dir: dir, Geteuid: func() int { return 0 }}
	for _, tc := range []struct {
		name string
		o    LabOptions
		want string
	}{
		{"no listen", LabOptions{Lab: user}, "flag --listen: want HOST:PORT, for example 127.0.0.1:8780"},
		{"port only", LabOptions{Lab: user, Listen: "8780"}, `flag --listen "8780": want HOST:PORT`},
		{"any address", LabOptions{Lab: user, Listen: "0.0.0.0:8780"}, "only loopback or the lab bridge's address (10.231.77.1)"},
		{"not root", LabOptions{Lab: user, Listen: "127.0.0.1:1"}, lab.ErrNotRoot.Error()},
		{"token file mode", LabOptions{Lab: root, Listen: "127.0.0.1:0", TokenFile: tf}, "flag --token-file: token file " + tf + ": mode 0644"},
		{"no faults file", LabOptions{Lab: user, Listen: "127.0.0.1:1", FaultsFile: filepath.Join(dir, "faults.json")},
			"flag --faults: faults file " + filepath.Join(dir, "faults.json") + ": no such file or directory"},
		{"bad faults file", LabOptions{Lab: user, Listen: "127.0.0.1:1", FaultsFile: bad},
			"flag --faults: faults file " + bad + ": rate_limited.retry_after_seconds: 0, want 1 to 3600"},
		{"requests file nowhere", LabOptions{Lab: user, Listen: "127.0.0.1:1", RequestsFile: filepath.Join(dir, "no", "requests.json")},
			"flag --requests " + filepath.Join(dir, "no", "requests.json") + ": no directory " + filepath.Join(dir, "no")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := ServeLab(context.Background(), "hcloud", tc.o, &cli.IOStreams{Out: &out, ErrOut: &out})
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
				t.Errorf("error %v, output %q; want a usage error with %q", err, out.String(), tc.want)
			}
		})
	}
}

// TestServeLabFaults: the flags' faults file and requests file reach each
// API: with every request rate limited, a request is answered 429 with
// Retry-After, and counted in the requests file. No lab box is booted.
func TestServeLabFaults(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ff, rf := filepath.Join(dir, "faults.json"), filepath.Join(dir, "requests.json")
			if err := faults.Write(ff, faults.Faults{RateLimited: &faults.RateLimited{RetryAfterSeconds: 7}}); err != nil {
				t.Fatal(err)
			}
			o := LabOptions{Lab: lab.Options{Dir: dir, Geteuid: func() int { return 0 }}, Listen: "127.0.0.1:0", FaultsFile: ff, RequestsFile: rf}
			ctx, cancel := context.WithCancel(context.Background())
			var out, errOut testutil.SyncBuffer
			done := make(chan error, 1)
			go func() { done <- ServeLab(ctx, name, o, &cli.IOStreams{Out: &out, ErrOut: &errOut}) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("ServeLab: %v", err)
				}
			}()
			api := APIs[name]
			var url string
			testutil.WaitFor(t, 10*time.Second, "the API's address", func() bool {
				_, rest, ok := strings.Cut(out.String(), "export "+api.Env+"=")
				url, _, _ = strings.Cut(rest, "\n")
				return ok && strings.Contains(rest, "\n")
			})
			if !strings.Contains(out.String(), "faults from "+ff+" (rate limited (every request, retry after 7s))") || !strings.Contains(out.String(), "request counts in "+rf) {
				t.Errorf("output %q: want the faults and requests files", out.String())
			}
			token, err := os.ReadFile(filepath.Join(dir, "localcloud-"+name+".token"))
			if err != nil {
				t.Fatal(err)
			}
			path := "/servers"
			if name == "digitalocean" {
				url, path = strings.TrimSuffix(url, "/"), "/v2/droplets"
			}
			code, h, body := testutil.Request(t, http.MethodGet, url+path, strings.TrimSpace(string(token)), "")
			if code != http.StatusTooManyRequests || h.Get("Retry-After") != "7" {
				t.Errorf("GET %s: %d %v %s, want 429 with Retry-After: 7", path, code, h, body)
			}
			counts, err := localcloud.ReadRequests(rf)
			if err != nil || counts.Total != 1 || counts.Statuses["429"] != 1 || counts.Routes["GET "+path] != 1 {
				t.Errorf("requests file: %+v %v, want the one 429 to GET %s", counts, err, path)
			}
		})
	}
}
