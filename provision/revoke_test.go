package provision

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRevocationList(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old := "jti=gone until=2026-12-07T11:00:00Z\njti=kept until=2026-12-08T00:00:00Z\nprefix=live/b issued-before=2026-12-07T10:00:00Z until=2026-12-09T00:00:00Z\n"
	rs, err := AddRevocation(old, Revocation{Prefix: "live/a", IssuedBefore: now, Until: now.Add(720 * time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	text := FormatRevocations(rs)
	want := "jti=kept until=2026-12-08T00:00:00Z\nprefix=live/b issued-before=2026-12-07T10:00:00Z until=2026-12-09T00:00:00Z\nprefix=live/a issued-before=2026-12-07T12:00:00Z until=2027-01-06T12:00:00Z\n"
	if !strings.HasSuffix(text, want) || strings.Contains(text, "gone") {
		t.Errorf("list:\n%s\nwant the expired entry dropped, ending with:\n%s", text, want)
	}
	back, err := ParseRevocations(text)
	if err != nil || len(back) != 3 {
		t.Fatalf("parse back: %v, %v", back, err)
	}
	// The same entry again keeps one line, with the later until.
	rs, _ = AddRevocation(text, Revocation{ID: "kept", Until: now.Add(48 * time.Hour)}, now)
	if got := FormatRevocations(rs); strings.Count(got, "jti=kept") != 1 || !strings.Contains(got, "jti=kept until=2026-12-09T12:00:00Z") {
		t.Errorf("revoking again:\n%s", got)
	}
	for _, bad := range []string{"jti=x\n", "prefix=live until=2026-12-08T00:00:00Z\n", "jti=x until=soon\n", "who=x\n"} {
		if _, err := ParseRevocations(bad); err == nil || !strings.Contains(err.Error(), "revocation list line 1") {
			t.Errorf("%q: %v, want an error naming line 1", bad, err)
		}
	}
}

func TestPushRevocations(t *testing.T) {
	dir := t.TempDir()
	list := []byte(FormatRevocations([]Revocation{{ID: "x", Until: time.Now().Add(time.Hour)}}))
	targets := []Target{{Host: Host{Name: "a"}, Run: localRunner{}}, {Host: Host{Name: "b"}, Run: localRunner{}}}
	var hosts []string
	err := PushRevocations(context.Background(), targets, list, filepath.Join(dir, "etc", "revoked"), 2, func(h string, err error) {
		if err != nil {
			t.Errorf("%s: %v", h, err)
		}
		hosts = append(hosts, h)
	})
	if err != nil || len(hosts) != 2 {
		t.Fatalf("push: %v, hosts %v", err, hosts)
	}
	got, err := os.ReadFile(filepath.Join(dir, "etc", "revoked"))
	if err != nil || !bytes.Equal(got, list) {
		t.Errorf("file %q, %v; want %q", got, err, list)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "etc", "revoked")); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (the relay, a dynamic user, reads it)", fi.Mode().Perm())
	}
	bad := []Target{{Host: Host{Name: "c"}, Run: localRunner{}}}
	if err := PushRevocations(context.Background(), bad, list, "relative/path", 1, nil); err == nil || !strings.Contains(err.Error(), "c") {
		t.Errorf("push to a relative path: %v, want an error naming the host", err)
	}
}
