//go:build e2e

// The key rotation on a two-box lab fleet through the real Pulumi CLI
// (issue 16.2): a change of admin.ssh_keys updates the boxes in place
// (the preview says update, nothing is replaced or deleted), the boxes keep
// their names, addresses and host keys, the new key logs in and the old
// one no longer does. It runs on its own lab (bridge rfsafc0, subnet
// 10.231.105.0/24, dir /var/lib/relayfleet/lab-safc) and state directory,
// sharing the image cache, and leaves no box behind.
package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

const (
	rotLabDir = "/var/lib/relayfleet/lab-safc"
	rotBridge = "rfsafc0"
	rotSubnet = "10.231.105.0/24"
)

// rotFleet is the test's fleet: one lab group of two boxes, named so that
// its boxes (systemd-nspawn machine names are host-wide) meet no other
// test's.
func rotFleet(t *testing.T, path, shape string, keys ...ssh.Signer) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nname: safc\naccess:\n  public_listen: [live/]\nadmin:\n  ssh_keys:\n")
	for i, k := range keys {
		fmt.Fprintf(&b, "    - %q\n", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey())))+fmt.Sprintf(" admin-%d", i))
	}
	fmt.Fprintf(&b, "steady:\n  - name: safc\n    provider: lab\n    shape: %s\n    count: 2\n    processes: auto\n    base_port: 4443\n", shape)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newAdminKey(t *testing.T) ssh.Signer {
	t.Helper()
	_, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// login logs in to the box as root with key, checking the box's host key,
// and runs true.
func login(b lab.Box, key ssh.Signer) error {
	hk, err := lab.ParseHostKey(b.HostKey)
	if err != nil {
		return err
	}
	c, err := ssh.Dial("tcp", b.SSHAddr(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 20 * time.Second,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run("true")
}

func TestE2EKeyRotationInPlace(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, rotLabDir, rotBridge, rotSubnet, map[string]string{"fleet": "safc"})
	cli, work, fleetBin, relayBin := e.cli, e.work, e.fleetBin, e.relayBin
	state, inv := e.state, filepath.Join(e.work, "safc.yaml")
	e.inv = inv
	l, ctx := e.lab, context.Background()
	boxes := func() []lab.Box { return e.boxes(e.owned) }
	fleet := func(args ...string) (string, int) { return e.run(nil, args...) }

	// 1. Two lab boxes with the old admin key.
	oldKey, newKey := newAdminKey(t), newAdminKey(t)
	rotFleet(t, inv, "small", oldKey)
	if out, code := fleet("up"); code != 0 {
		t.Fatalf("fleet up: exit %d: %s", code, lastLine(out))
	}
	before := boxes()
	if len(before) != 2 {
		t.Fatalf("%d boxes after up, want 2", len(before))
	}
	for _, b := range before {
		if err := login(b, oldKey); err != nil {
			t.Fatalf("%s: the old key does not log in before the rotation: %v", b.Name, err)
		}
		if err := login(b, newKey); err == nil {
			t.Fatalf("%s: the new key logs in before the rotation", b.Name)
		}
	}

	// 2. The rotation: the preview updates the boxes, replaces and deletes
	// nothing.
	rotFleet(t, inv, "small", newKey)
	out, code := fleet("preview")
	sum := summary(out, "preview: stack safc: ")
	if code != 0 || !strings.Contains(sum, "2 update") {
		t.Fatalf("preview of the rotation: exit %d, summary %q, want 2 update", code, sum)
	}
	for _, op := range []string{"replace", "delete", "create"} {
		if strings.Contains(sum, op) {
			t.Fatalf("preview of the rotation: summary %q: a key rotation must %s nothing", sum, op)
		}
	}

	// 3. Up: the same boxes, with the new key only.
	out, code = fleet("up")
	sum = summary(out, "up: stack safc: ")
	if code != 0 || !strings.Contains(sum, "2 update") || strings.Contains(sum, "replace") || strings.Contains(sum, "delete") || strings.Contains(sum, "create") {
		t.Fatalf("up of the rotation: exit %d, summary %q, want 2 update and nothing else", code, sum)
	}
	if strings.Contains(out, "would replace or destroy") {
		t.Fatalf("up asked about boxes to replace or destroy on a key rotation:\n%s", out)
	}
	after := boxes()
	if len(after) != 2 {
		t.Fatalf("%d boxes after the rotation, want 2", len(after))
	}
	for i, b := range after {
		o := before[i]
		if b.Name != o.Name || b.Address != o.Address || b.HostKey != o.HostKey || !b.Created.Equal(o.Created) {
			t.Errorf("box %s at %s (made %v) became %s at %s (made %v): a rotation must keep the box", o.Name, o.Address, o.Created, b.Name, b.Address, b.Created)
		}
		if err := login(b, newKey); err != nil {
			t.Errorf("%s: the new key does not log in after the rotation: %v", b.Name, err)
		}
		err := login(b, oldKey)
		if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Errorf("%s: the old key after the rotation: %v, want it refused", b.Name, err)
		}
		// relayfleet's own way in, the lab's admin key, is kept.
		if err := l.Run(ctx, b.Name, "true", nil, nil, os.Stderr); err != nil {
			t.Errorf("%s: the lab's admin key no longer logs in: %v", b.Name, err)
		}
		if len(b.AuthorizedKeys) != 1 || !strings.Contains(b.AuthorizedKeys[0], "admin-0") {
			t.Errorf("%s: the lab records keys %v", b.Name, b.AuthorizedKeys)
		}
	}

	// 4. A listener on the first box, then a change that replaces the
	// boxes (the shape): without a terminal and without --yes, up refuses
	// and changes nothing.
	tokOut, err := exec.Command(fleetBin, "token", "--inventory", inv, "--publish", "live/", "--state-dir", state, "--pulumi", cli).Output()
	if err != nil {
		t.Fatalf("fleet token: %v", err)
	}
	tokFile := filepath.Join(work, "publish.jwt")
	if err := os.WriteFile(tokFile, tokOut, 0o600); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:4443/", after[0].Address)
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	pub := exec.CommandContext(lctx, relayBin, "publish", "--name", "live/show", "--paced", "--trust-http-hash", "--token-file", tokFile, url)
	lis := exec.CommandContext(lctx, relayBin, "listen", "--name", "live/show", "--trust-http-hash", url)
	pub.Stdout, lis.Stdout = io.Discard, io.Discard
	testutil.Start(t, "publisher", pub)
	testutil.Start(t, "listener", lis)
	var buf bytes.Buffer
	if !testutil.PollEvery(2*time.Minute, time.Second, func() bool {
		buf.Reset()
		l.Run(ctx, after[0].Name, "exec 3<>/dev/tcp/127.0.0.1/4443 && printf 'GET /stats HTTP/1.0\r\n\r\n' >&3 && cat <&3", nil, &buf, io.Discard)
		return regexp.MustCompile(`"subscribers":\s*[1-9]`).MatchString(buf.String())
	}) {
		t.Fatalf("no listener on %s after 2 minutes: %s", after[0].Name, buf.String())
	}
	rotFleet(t, inv, "medium", newKey)
	out, code = fleet("up")
	if code == 0 || !strings.Contains(lastLine(out), "--yes") || !strings.Contains(lastLine(out), after[0].Name) || strings.Contains(lastLine(out), after[1].Name+",") {
		t.Fatalf("up of a replace with a listener, no terminal, no --yes: exit %d, last line %q; want a refusal naming %s and --yes", code, lastLine(out), after[0].Name)
	}
	if !strings.Contains(out, " 1 listener\n") || !strings.Contains(out, " 0 listeners\n") || strings.Count(out, "replace (") != 2 {
		t.Fatalf("up did not show the two boxes it would replace with their listeners:\n%s", out)
	}
	if bs := boxes(); len(bs) != 2 || bs[0].Name != after[0].Name || !bs[0].Created.Equal(after[0].Created) {
		t.Fatalf("the refused up changed the boxes: %v", bs)
	}

	// 5. With --yes: the replacements are made before the old boxes go
	// (more than two boxes at once, seen while it runs), on names of their
	// own, and the old boxes are drained, then deleted.
	most := 0
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			if bs, err := l.List(ctx, map[string]string{"fleet": "safc"}); err == nil && len(bs) > most {
				most = len(bs)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	out, code = fleet("up", "--yes")
	stopWatch()
	<-watched
	sum = summary(out, "up: stack safc: ")
	if code != 0 || !strings.Contains(sum, "2 replace") || !strings.Contains(out, "--yes: going ahead") {
		t.Fatalf("up --yes: exit %d, summary %q, want 2 replace", code, sum)
	}
	if most <= 2 {
		t.Errorf("at most %d boxes during the replace: the old boxes went before their replacements were made", most)
	}
	if strings.Contains(out, "not drained before the delete") {
		t.Errorf("an old box was not drained:\n%s", out)
	}
	final := boxes()
	if len(final) != 2 {
		t.Fatalf("%d boxes after the replace, want 2", len(final))
	}
	for i, b := range final {
		if b.Name != after[i].Name+"-r1" || b.Cores != lab.Medium.Cores {
			t.Errorf("box %s with %d cores after the replace, want %s-r1, medium", b.Name, b.Cores, after[i].Name)
		}
		if err := login(b, newKey); err != nil {
			t.Errorf("%s: the admin key does not log in to the replacement: %v", b.Name, err)
		}
	}
}
