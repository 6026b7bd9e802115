package provision

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestHostKeyRotation: over a session pinned to the box's first key, a
// real sshd's host key is replaced by one made on the box; the key
// returned is the one sshd then serves: a new connection pinned to it
// gets in, one pinned to the first key is refused, and the private half
// is root's alone.
func TestHostKeyRotation(t *testing.T) {
	f := newFixture(t, sshdOpts{})
	ctx := context.Background()
	file := filepath.Join(f.srv.dir, "host_key")
	r := HostKeyRotation{File: file, Reload: "kill -HUP $(cat '" + filepath.Join(f.srv.dir, "sshd.pid") + "')"}
	key, err := r.Rotate(ctx, f.pool.Runner(f.host), "root@box1")
	if err != nil {
		t.Fatal(err)
	}
	if ssh.FingerprintSHA256(key) == ssh.FingerprintSHA256(f.srv.hostKey) {
		t.Fatal("the key did not change")
	}
	pub, err := os.ReadFile(file + ".pub")
	if err != nil || !strings.HasPrefix(string(pub), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))+" root@box1") {
		t.Errorf("%s.pub: %q %v, want the new key", file, pub, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v %v, want mode 0600", file, fi, err)
	}
	if _, err := os.Stat(file + ".relayfleet-new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the new key's temporary file is left: %v", err)
	}

	dial := func(pinned ssh.PublicKey) error {
		known := filepath.Join(t.TempDir(), "known_hosts")
		if err := PinKey(known, f.srv.addr, pinned); err != nil {
			t.Fatal(err)
		}
		p := &Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)}, Keys: &HostKeys{File: known}, RetryFor: 5 * time.Second, DialTimeout: 2 * time.Second}
		defer p.Close()
		_, err := p.Run(ctx, f.host, "true", nil)
		return err
	}
	// sshd re-executes itself on SIGHUP: give it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for err := dial(key); err != nil; err = dial(key) {
		if time.Now().After(deadline) {
			t.Fatalf("a connection pinned to the new key: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := dial(f.srv.hostKey); !errors.Is(err, ErrHostKey) {
		t.Errorf("a connection pinned to the first key: %v, want it refused", err)
	}
	// The session pinned to the first key outlives the rotation.
	if _, err := f.pool.Run(ctx, f.host, "true", nil); err != nil {
		t.Errorf("the rotating session after the reload: %v", err)
	}
}

// TestHostKeyRotationRefuses: what would not be one shell word is refused
// before anything runs.
func TestHostKeyRotationRefuses(t *testing.T) {
	for _, tc := range []struct {
		r       HostKeyRotation
		comment string
		want    string
	}{
		{HostKeyRotation{}, "root@box; rm -rf /", "host key comment"},
		{HostKeyRotation{File: "relative"}, "root@box", "host key file"},
		{HostKeyRotation{File: "/etc/ssh/it's"}, "root@box", "host key file"},
	} {
		if _, err := tc.r.Rotate(context.Background(), nil, tc.comment); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %q: %v, want %q", tc.r, tc.comment, err, tc.want)
		}
	}
}
