package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTest writes a backup file of three entries, the last a big one,
// and returns its path and bytes.
func writeTest(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.backup")
	w, err := create(path, &Manifest{Format: Format, Fleet: "f", Backend: "file:///x", Made: time.Unix(1e9, 0).UTC()})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i * 7 % 251) // not all zeros: compresses little
	}
	for _, e := range []struct {
		e    Entry
		data []byte
	}{
		{Entry{Name: "stacks/relayfleet-infra/f.json", Kind: KindStack, Project: "relayfleet-infra", Stack: "f"}, []byte(`{"version":3}`)},
		{Entry{Name: "objects/.pulumi/history/relayfleet-infra/f/f-1.history.json", Kind: KindObject, Key: ".pulumi/history/relayfleet-infra/f/f-1.history.json"}, []byte(`{"kind":"update"}`)},
		{Entry{Name: "objects/.relayfleet/releases/aa", Kind: KindObject, Key: ".relayfleet/releases/aa"}, big},
	} {
		if err := w.add(e.e, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.commit(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestArchiveRoundTrip: a written file is mode 0600, leaves no temporary
// beside it, and reads back with every entry checked.
func TestArchiveRoundTrip(t *testing.T) {
	path, _ := writeTest(t)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	m, err := Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Fleet != "f" || m.Stacks() != 1 || m.Objects() != 2 || m.Entries[2].Size != 256<<10 || len(m.Entries[2].SHA256) != 64 {
		t.Errorf("manifest %+v", m)
	}
}

// TestArchiveRefusesDamage: a file cut anywhere, or with one byte
// changed, is refused in one line naming the file and, where the fault
// is in one, the entry.
func TestArchiveRefusesDamage(t *testing.T) {
	path, data := writeTest(t)
	damaged := filepath.Join(t.TempDir(), "damaged.backup")
	check := func(name string, b []byte, wantEntry string) {
		t.Helper()
		if err := os.WriteFile(damaged, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(damaged)
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v, want a CorruptError", name, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "backup file "+damaged+": ") || strings.Contains(msg, "\n") || !strings.HasSuffix(msg, "nothing restored") {
			t.Errorf("%s: %q: want one line naming the file", name, msg)
		}
		if wantEntry != "" && ce.Entry != wantEntry {
			t.Errorf("%s: %q names entry %q, want %q", name, msg, ce.Entry, wantEntry)
		}
	}
	check("half", data[:len(data)/2], "objects/.relayfleet/releases/aa")
	if testing.Verbose() {
		os.WriteFile(damaged, data[:len(data)/2], 0o600)
		_, err := Verify(damaged)
		t.Log(err)
	}
	check("no trailer", data[:len(data)-4], "")
	check("empty", nil, "")
	// Cut at every 512th byte: each is refused, never read as a shorter
	// backup.
	for n := 0; n < len(data)-8; n += 512 {
		if err := os.WriteFile(damaged, data[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(damaged); err == nil {
			t.Fatalf("cut at %d of %d bytes: accepted", n, len(data))
		}
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/3] ^= 0x40
	check("a byte changed", flipped, "")
	if _, err := Verify(path); err != nil {
		t.Errorf("the intact file: %v", err)
	}
}

// TestWhatARestoreWrites: a restore writes only what a backup of the
// fleet holds: its stacks' update records and tags and relay builds,
// never a lease, another fleet's state or a key outside the backend's
// bookkeeping.
func TestWhatARestoreWrites(t *testing.T) {
	for key, want := range map[string]bool{
		".pulumi/history/relayfleet-infra/lab/lab-1733600000.history.json":            true,
		".pulumi/history/relayfleet-events/lab-records/lab-records-1.history.json.gz": true,
		".pulumi/stacks/relayfleet-events/lab-heartbeat.pulumi-tags":                  true,
		".relayfleet/releases/" + strings.Repeat("ab", 32):                            true,
		".relayfleet/leases/lab/take/00000000000000000001":                            false,
		".pulumi/history/relayfleet-infra/other/other-1.history.json":                 false,
		".pulumi/history/someone-else/lab/lab-1.history.json":                         false,
		".pulumi/stacks/relayfleet-infra/lab.json":                                    false,
		".pulumi/meta.yaml":                false,
		".relayfleet/releases/../leases/x": false,
		".relayfleet/releases/sub/dir":     false,
		"/etc/passwd":                      false,
	} {
		if got := restorable(key, "lab"); got != want {
			t.Errorf("restorable(%q) = %v, want %v", key, got, want)
		}
	}
	for _, tc := range []struct {
		project, stack string
		want           bool
	}{
		{"relayfleet-infra", "lab", true}, {"relayfleet-infra", "lab-event-final", true}, {"relayfleet-events", "lab-records", true},
		{"relayfleet-releases", "lab", true}, {"relayfleet-events", "lab-heartbeat", true},
		{"relayfleet-infra", "labs", false}, {"relayfleet-infra", "lab-b", false}, {"relayfleet-events", "lab-b-records", false},
		{"relayfleet-releases", "lab-b", false}, {"other", "lab", false},
	} {
		if got := IsFleetStack(tc.project, tc.stack, "lab"); got != tc.want {
			t.Errorf("IsFleetStack(%s, %s) = %v", tc.project, tc.stack, got)
		}
	}
}
