package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestLabCloudUsageErrors(t *testing.T) {
	asUser(t, 1000) // bad input is reported before the root check
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "cloud"}, "want a provider"},
		{[]string{"lab", "cloud", "--listen", "127.0.0.1:1"}, "want a provider (hcloud or digitalocean)"},
		{[]string{"lab", "cloud", "aws", "--listen", "127.0.0.1:1"}, `unknown provider "aws"`},
		{[]string{"lab", "cloud", "hcloud"}, "flag --listen: want HOST:PORT"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "8780"}, `flag --listen "8780": want HOST:PORT`},
		{[]string{"lab", "cloud", "hcloud", "--listen", "0.0.0.0:8780"}, "only loopback or the lab bridge's address (10.231.77.1)"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "192.0.2.1:8780"}, "only loopback"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "example.com:8780"}, "want an IP address"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "127.0.0.1:1", "--ram-scale", "0"}, "flag --ram-scale: 0 is out of range: want 0.01 to 1"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "127.0.0.1:1", "--ram-scale", "2"}, "flag --ram-scale"},
		{[]string{"lab", "cloud", "hcloud", "--port", "1"}, "flag --port: unknown flag"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "127.0.0.1:1", "--faults", "/nonexistent/faults.json"}, "flag --faults: faults file /nonexistent/faults.json: no such file or directory"},
		{[]string{"lab", "cloud", "digitalocean", "--listen", "127.0.0.1:1", "--requests", "/nonexistent/requests.json"}, "flag --requests /nonexistent/requests.json: no directory /nonexistent to write it in"},
		{[]string{"lab", "cloud", "hcloud", "--listen", "127.0.0.1:1"}, "root is needed"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != exitUsage || !strings.HasPrefix(errOut, "fleet lab cloud: ") || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and one line with %q", code, errOut, out, tc.want)
			}
		})
	}
}

func TestLabCloudTokenFileMode(t *testing.T) {
	asUser(t, 0)
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := fleet(t, "lab", "cloud", "hcloud", "--listen", "127.0.0.1:0", "--dir", dir, "--token-file", tf)
	if code != exitUsage || !strings.Contains(errOut, "flag --token-file: token file "+tf+": mode 0644") || out != "" {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errOut, out)
	}
}

// TestLabCloudServes starts `fleet lab cloud hcloud` and `fleet lab cloud
// digitalocean` on loopback: each makes a 0600 token file, prints where the
// API is and where the token is (not the token), answers with the token
// and refuses without it, and stops when its context ends.
func TestLabCloudServes(t *testing.T) {
	asUser(t, 0) // no box is made
	for _, tc := range []struct{ provider, endpoint, list string }{
		{"hcloud", `export HCLOUD_ENDPOINT=(http://127\.0\.0\.1:\d+/v1)\n`, "/servers"},
		{"digitalocean", `export DIGITALOCEAN_API_URL=(http://127\.0\.0\.1:\d+)/\n`, "/v2/droplets"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out testutil.SyncBuffer
			done := make(chan int, 1)
			ios := &cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: io.Discard}
			go func() {
				done <- execute(ctx, []string{"lab", "cloud", tc.provider, "--listen", "127.0.0.1:0", "--dir", dir}, ios)
			}()
			re := regexp.MustCompile(tc.endpoint)
			var base string
			testutil.Poll(30*time.Second, func() bool {
				if m := re.FindStringSubmatch(out.String()); m != nil {
					base = m[1]
				}
				return base != ""
			})
			if base == "" {
				t.Fatalf("no endpoint printed: %q", out.String())
			}
			tf := filepath.Join(dir, "localcloud-"+tc.provider+".token")
			st, err := os.Stat(tf)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("token file: %v %v", st, err)
			}
			data, _ := os.ReadFile(tf)
			token := strings.TrimSpace(string(data))
			if len(token) < 32 || strings.Contains(out.String(), token) || !strings.Contains(out.String(), tf) {
				t.Errorf("output %q: want the token file's path, never the token", out.String())
			}
			get := func(tok string) int {
				req, _ := http.NewRequest("GET", base+tc.list, nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if c := get(token); c != 200 {
				t.Errorf("with the token: %d", c)
			}
			if c := get(""); c != 401 {
				t.Errorf("without a token: %d", c)
			}
			cancel()
			select {
			case code := <-done:
				if code != exitOK {
					t.Errorf("after the context ended: exit %d", code)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("still serving after the context ended")
			}
			if _, err := os.Stat(filepath.Join(dir, "localcloud-"+tc.provider+".json")); err != nil {
				t.Errorf("state file: %v", err)
			}
		})
	}
}

// TestLabCloudFaultsFlag: `fleet lab cloud --faults F --requests R` answers
// as F says, F rewritten while it serves is read again, and R counts the
// requests: what a test running the command as a process reads.
func TestLabCloudFaultsFlag(t *testing.T) {
	asUser(t, 0) // no box is made
	dir := t.TempDir()
	ff, rf := filepath.Join(dir, "faults.json"), filepath.Join(dir, "requests.json")
	if err := os.WriteFile(ff, []byte(`{"version": 1, "rate_limited": {"retry_after_seconds": 3}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- execute(ctx, []string{"lab", "cloud", "hcloud", "--listen", "127.0.0.1:0", "--dir", dir, "--faults", ff, "--requests", rf},
			&cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	}()
	re := regexp.MustCompile(`export HCLOUD_ENDPOINT=(http://127\.0\.0\.1:\d+/v1)\n`)
	var base string
	testutil.Poll(30*time.Second, func() bool {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	if base == "" {
		t.Fatalf("no endpoint printed: %q", out.String())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "localcloud-hcloud.token"))
	token := strings.TrimSpace(string(data))
	if code, h, _ := testutil.Request(t, http.MethodGet, base+"/servers", token, ""); code != http.StatusTooManyRequests || h.Get("Retry-After") != "3" {
		t.Errorf("with every request rate limited: %d, Retry-After %q", code, h.Get("Retry-After"))
	}
	if err := os.WriteFile(ff, []byte(`{"version": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, body := testutil.Request(t, http.MethodGet, base+"/servers", token, ""); code != http.StatusOK {
		t.Errorf("with the faults cleared: %d %s", code, body)
	}
	if counts, err := localcloud.ReadRequests(rf); err != nil || counts.Total != 2 || counts.Statuses["429"] != 1 || counts.Routes["GET /servers"] != 2 {
		t.Errorf("requests file: %+v %v, want two GET /servers, one 429", counts, err)
	}
	if !strings.Contains(errOut.String(), "faults file "+ff+": read: no faults") {
		t.Errorf("log %q: want the faults file read again", errOut.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("after the context ended: exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still serving after the context ended")
	}
}
