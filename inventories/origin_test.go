package inventories

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOriginPin: the fleet file's origin URLs carry the origin's key pin
// as #spki=HEX; a malformed pin, or an http:// origin off loopback with no
// pin (edges would trust a hash fetched in clear text), is refused with
// the file, line and field.
func TestOriginPin(t *testing.T) {
	cat := shippedCatalogue(t)
	pin := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name   string
		origin string
		msg    string // "" means accepted
	}{
		{"pinned http", "http://10.0.0.1:4443/#spki=" + pin, ""},
		{"pinned upper case", "http://10.0.0.1:4443/#spki=" + strings.ToUpper(pin), ""},
		{"pinned https", "https://origin.example:4443/#spki=" + pin, ""},
		{"https with a CA", "https://origin.example:4443/", ""},
		{"loopback", "http://127.0.0.1:4443/", ""},
		{"unpinned http", "http://10.0.0.1:4443/", "needs its key pinned"},
		{"unpinned http by name", "http://origin.example:4443/", "needs its key pinned"},
		{"short pin", "http://10.0.0.1:4443/#spki=abcd", "64 hex digits"},
		{"not hex", "http://10.0.0.1:4443/#spki=" + strings.Repeat("zz", 32), "64 hex digits"},
		{"other fragment", "http://10.0.0.1:4443/#pin=" + pin, "spki="},
		{"empty fragment", "http://10.0.0.1:4443/#", "spki="},
		{"no port", "https://origin.example/", "want a port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.yaml")
			data := "version: 1\nname: f\norigin:\n  - \"http://127.0.0.1:4443/\"\n  - \"" + tc.origin + "\"\n"
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := LoadFleet(path, cat)
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("LoadFleet: %v", err)
				}
				if f.Origin[1] != tc.origin {
					t.Fatalf("origin %q, want %q as written", f.Origin[1], tc.origin)
				}
				return
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ie.File != path || ie.Line != 5 || ie.Field != "origin[1]" || !strings.Contains(ie.Msg, tc.msg) {
				t.Fatalf("got %v; want %s:5: origin[1]: ...%s...", err, path, tc.msg)
			}
		})
	}
}

// TestOriginsGroup: the fleet file's origins: group makes origin boxes,
// at least two; a smaller count, a static provider, origin: beside it or
// a steady group named like the origin group is refused with the file,
// line and field.
func TestOriginsGroup(t *testing.T) {
	cat := shippedCatalogue(t)
	steady := "steady:\n  - name: edge\n    provider: lab\n    shape: small\n    count: 1\n"
	for _, tc := range []struct {
		name  string
		body  string
		line  int
		field string
		msg   string // "" means accepted
	}{
		{"two", "origins:\n  provider: lab\n  shape: small\n  count: 2\n" + steady, 0, "", ""},
		{"one", "origins:\n  provider: lab\n  shape: small\n  count: 1\n" + steady, 6, "origins.count", "at least 2"},
		{"none counted", "origins:\n  provider: lab\n  shape: small\n" + steady, 0, "origins.count", "at least 2"},
		{"static", "origins:\n  provider: static\n  shape: hcloud/cx22\n  count: 2\n" + steady, 4, "origins.provider", "origin:"},
		{"unknown shape", "origins:\n  provider: lab\n  shape: huge\n  count: 2\n" + steady, 5, "origins.shape", "no shape"},
		{"both", "origin:\n  - \"http://127.0.0.1:4443/\"\norigins:\n  provider: lab\n  shape: small\n  count: 2\n" + steady, 6, "origins", "keep one of origin: and origins:"},
		{"group name taken", "origins:\n  provider: lab\n  shape: small\n  count: 2\nsteady:\n  - name: origin\n    provider: lab\n    shape: small\n    count: 1\n", 8, "steady[0].name", "origin group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.yaml")
			if err := os.WriteFile(path, []byte("version: 1\nname: f\n"+tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := LoadFleet(path, cat)
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("LoadFleet: %v", err)
				}
				if f.Origins == nil || f.Origins.Count != 2 || f.Origins.BasePort != DefaultBasePort {
					t.Fatalf("origins %+v, want 2 boxes on port %d", f.Origins, DefaultBasePort)
				}
				if b := f.Origins.Box(); b.Processes != 1 {
					t.Fatalf("origin box runs %d processes, want 1", b.Processes)
				}
				return
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ie.File != path || ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) || (tc.line != 0 && ie.Line != tc.line) {
				t.Fatalf("got %v (line %d); want %s:%d: %s: ...%s...", err, ie.Line, path, tc.line, tc.field, tc.msg)
			}
		})
	}
}
