//go:build lab

package provision_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/units"
)

// TestAuthLabBox: a box converged with the fleet's key runs relays that
// refuse a publisher without a token (and count it), take one with a
// token signed by the fleet's key, let listeners in under the public
// prefix without a token and nowhere else; the key file is root's alone
// and reaches the relay only through its credentials directory; a
// rotation restarts the relays, and tokens of both keys work in the
// overlap.
func TestAuthLabBox(t *testing.T) {
	boxes, pool := labFleet(t, 1, lab.Small)
	b := boxes[0]
	run := pool.Runner(host(b))
	ctx := context.Background()
	binary := buildRelay(t)
	relayBin := filepath.Join(t.TempDir(), "relay")
	if err := os.WriteFile(relayBin, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	release := provision.Digest(binary)
	first, _, _, err := provision.RotateAuthKeys("", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := provision.FormatAuthKeys(first) // the fleet's state
	secret := base64.StdEncoding.EncodeToString(first[0].Seed)
	layout := units.Layout{Cores: b.Cores, RAM: b.RAM, BasePort: 4443, Binary: provision.DefaultRoot + "/current/relay", PublicListen: []string{"live/"}}
	p, err := provision.DesiredAuth(layout, release, []byte(provision.BoxKeyFile(first, time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := provision.Converge(ctx, run, p, provision.Releases{}, binary, false)
	if err != nil {
		journal(t, run)
		t.Fatal(err)
	}
	for _, c := range rep.Changes {
		if strings.Contains(c.String(), secret) {
			t.Errorf("a change shows the key: %s", c)
		}
	}

	// The key file: 0600 root in a 0700 directory; a dynamic user (as the
	// relay runs) cannot read it; the relay has its own copy as a
	// credential.
	out, err := run.Run(ctx, "stat -c '%a %U %G' "+units.CredentialFile+" "+units.CredentialDir, nil)
	if err != nil || strings.Fields(string(out)) == nil || strings.Join(strings.Fields(string(out)), " ") != "600 root root 700 root root" {
		t.Errorf("key file and directory: %q (%v), want 600 root root 700 root root", out, err)
	}
	out, err = run.Run(ctx, "systemd-run --quiet --wait --pipe -p DynamicUser=yes cat "+units.CredentialFile+" 2>&1; echo exit=$?", nil)
	if err != nil || strings.Contains(string(out), secret) || strings.Contains(string(out), "exit=0") {
		t.Errorf("a dynamic user read the key file: %q (%v)", out, err)
	}
	out, err = run.Run(ctx, "test -f /run/credentials/relay@4443.service/"+units.CredentialName+" && echo present", nil)
	if err != nil || strings.TrimSpace(string(out)) != "present" {
		t.Errorf("the relay's credential: %q (%v)", out, err)
	}
	if out, _ := run.Run(ctx, "ps -eo args | grep -c '[r]elay serve.*--auth-key %d' || true; ps -eo args | grep '[r]elay serve'", nil); strings.Contains(string(out), secret) {
		t.Errorf("the key is on a command line: %s", out)
	}

	// LoadCredential costs no hardening: the exposure score stays <= 2.0.
	out, err = run.Run(ctx, "systemd-analyze security --no-pager relay@4443.service | tail -n1", nil)
	var score float64
	if _, serr := fmt.Sscanf(strings.TrimSpace(string(out)), "→ Overall exposure level for relay@4443.service: %f", &score); err != nil || serr != nil || score > 2.0 {
		t.Errorf("exposure %q (%v %v): want at most 2.0", out, err, serr)
	}
	t.Logf("systemd-analyze security relay@4443.service with the credential: %s", strings.TrimSpace(string(out)))

	addr, _, _ := net.SplitHostPort(b.SSHAddr())
	url := "http://" + net.JoinHostPort(addr, "4443") + "/"
	sign := func(key []byte, pub, sub string) string {
		t.Helper()
		tok, err := relay.NewToken(key, pub, sub, pub != "", sub != "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return "?jwt=" + tok
	}
	relayCmd := func(limit time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		// The box is on this machine's own lab bridge: its certificate
		// hash may come over plain HTTP.
		out, err := exec.CommandContext(ctx, relayBin, append(args, "--trust-http-hash")...).CombinedOutput()
		return string(out), err
	}
	publish := func(name, query string) *testutil.Proc {
		t.Helper()
		return testutil.Start(t, "publish-"+strings.ReplaceAll(name, "/", "-"), exec.Command(relayBin, "publish", "--paced", "--interval", "100ms", "--name", name, "--trust-http-hash", url+query))
	}

	// No token: refused, and counted.
	if out, err := relayCmd(20*time.Second, "publish", "--paced", "--groups", "3", "--name", "live/open", url); err == nil {
		t.Errorf("publish without a token succeeded: %s", out)
	}
	// The tokenless session is admitted for the public prefix; its
	// publish is refused as forbidden (unauthorized without public
	// prefixes).
	if n := refused(t, url); n["forbidden"]+n["unauthorized"] < 1 {
		t.Errorf("refused_by_reason %v, want the refusal counted", n)
	}
	// With a token of the fleet's key: it works; listeners need none
	// under live/, and one elsewhere.
	publish("live/a", sign(first[0].Seed, "live/", ""))
	publish("private/b", sign(first[0].Seed, "private/", ""))
	testutil.WaitFor(t, 20*time.Second, "the relay to announce live/a and private/b", func() bool { return broadcasts(url) >= 2 })
	if out, err := relayCmd(30*time.Second, "listen", "--name", "live/a", "--groups", "3", url); err != nil {
		t.Errorf("public listen without a token: %v: %s", err, out)
	}
	if out, err := relayCmd(30*time.Second, "listen", "--name", "private/b", "--groups", "3", url); err == nil {
		t.Errorf("listen outside the public prefix without a token succeeded: %s", out)
	}
	if out, err := relayCmd(30*time.Second, "listen", "--name", "private/b", "--groups", "3", url+sign(first[0].Seed, "", "private/")); err != nil {
		t.Errorf("listen with a token: %v: %s", err, out)
	}

	// Rotation: the relays restart on the new key file; in the overlap a
	// token of either key works.
	second, _, _, err := provision.RotateAuthKeys(keys, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	before := mainPIDs(t, run)
	p2, err := provision.DesiredAuth(layout, release, []byte(provision.BoxKeyFile(second, time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	_, err = provision.Converge(ctx, run, p2, provision.Releases{}, binary, false)
	if err != nil {
		journal(t, run)
		t.Fatal(err)
	}
	after := mainPIDs(t, run)
	for u, pid := range before {
		if after[u] == pid {
			t.Errorf("%s kept running on the old key file (pid %s)", u, pid)
		}
	}
	for i, k := range []provision.AuthKey{second[0], second[2]} { // the new and the old signing key
		name := "live/r" + string(rune('0'+i))
		publish(name, sign(k.Seed, "live/", ""))
		// The restarted relay has only the broadcasts published since:
		// the publishers of before the rotation do not reconnect.
		testutil.WaitFor(t, 20*time.Second, "the relay to announce "+name, func() bool { return broadcasts(url) >= i+1 })
		if out, err := relayCmd(30*time.Second, "listen", "--name", name, "--groups", "3", url); err != nil {
			t.Errorf("publish with a token of key %s after rotation: %v: %s", k.ID(), err, out)
		}
	}
}

// broadcasts reads a relay's /stats broadcasts: the broadcasts announced
// to it now; -1 when it does not answer.
func broadcasts(url string) int {
	resp, err := http.Get(url + "stats")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st struct {
		Broadcasts int `json:"broadcasts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return -1
	}
	return st.Broadcasts
}

// refused reads a relay's /stats refused_by_reason.
func refused(t *testing.T, url string) map[string]int64 {
	t.Helper()
	resp, err := http.Get(url + "stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		RefusedByReason map[string]int64 `json:"refused_by_reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.RefusedByReason
}
