package sysctl

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzParse feeds arbitrary /etc/sysctl.d text to Parse. What parses has
// trimmed keys without '=' and whitespace-normalised values, and written
// back as KEY = VALUE lines parses to the same map; an error is one line.
func FuzzParse(f *testing.F) {
	golden, err := Relay().Render()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(golden), "a=1\n", " -net.core.x =  4096\t87380  6291456 \r\n", "# c\n; c\n\n", "novalue\n",
		"k = a=b\n", "k=\n", "=v\n", "--k = 1\n", "k = 1\nk = 2\n", "k\t=\tv",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is more than one line: %q", err)
			}
			return
		}
		var b strings.Builder
		for k, v := range m {
			if k != strings.TrimSpace(k) || strings.Contains(k, "=") {
				t.Fatalf("key %q: not trimmed, or holds '='", k)
			}
			if v != normalise(v) {
				t.Fatalf("key %q: value %q is not whitespace-normalised", k, v)
			}
			if k == "" || strings.ContainsAny(k[:1], "#;-") {
				continue // would read back as a comment or a '-' key
			}
			fmt.Fprintf(&b, "%s = %s\n", k, v)
		}
		again, err := Parse([]byte(b.String()))
		if err != nil {
			t.Fatalf("written back: %v\n%s", err, b.String())
		}
		maps.DeleteFunc(m, func(k, _ string) bool { return k == "" || strings.ContainsAny(k[:1], "#;-") })
		if !maps.Equal(m, again) {
			t.Fatalf("parsed %q, written back and parsed %q", m, again)
		}
	})
}

// FuzzRenderParse renders a profile of one arbitrary setting: when Render
// accepts it, Parse reads the setting back as it is.
func FuzzRenderParse(f *testing.F) {
	for _, s := range Relay().Settings {
		f.Add(s.Key, s.Value, s.Reason)
	}
	f.Add("net.ipv4.tcp_rmem", "4096\t87380 6291456", "three numbers")
	f.Add("-net.core.rmem_max", "1", "")
	f.Add("kernel.x", "a = b", "# a comment #")
	f.Add("a", " ", "")
	f.Fuzz(func(t *testing.T, key, value, reason string) {
		p := Profile{Name: "fuzz", File: "/etc/sysctl.d/99-fuzz.conf", Settings: []Setting{{Key: key, Value: value, Reason: reason}}}
		data, err := p.Render()
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is more than one line: %q", err)
			}
			return
		}
		m, err := Parse(data)
		if err != nil {
			t.Fatalf("rendered %q does not parse: %v", data, err)
		}
		if want := map[string]string{key: normalise(value)}; !maps.Equal(m, want) {
			t.Fatalf("rendered %q parses as %q, want %q", data, m, want)
		}
	})
}

// FuzzReadCompare reads the relay profile's keys from a /proc/sys tree
// holding arbitrary bytes: each value is read whitespace-normalised, and
// values that did not change between before and after are never counted
// as applied.
func FuzzReadCompare(f *testing.F) {
	f.Add([]byte("16777216\n"), []byte("212992\n"))
	f.Add([]byte("4096\t87380\t6291456\n"), []byte(""))
	f.Add([]byte(" 33554432 "), []byte("+16777216"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fsys := fstest.MapFS{}
		prof := Relay()
		for i, s := range prof.Settings {
			content := a
			if i%2 == 1 {
				content = b
			}
			fsys[strings.TrimPrefix(ProcPath(s.Key), "/")] = &fstest.MapFile{Data: content}
		}
		got, errs := prof.Read(fsys)
		if len(errs) != 0 {
			t.Fatalf("read: %v", errs)
		}
		for i, s := range prof.Settings {
			content := a
			if i%2 == 1 {
				content = b
			}
			if want := strings.Join(strings.Fields(string(content)), " "); got[s.Key] != want {
				t.Fatalf("%s read as %q, want %q", s.Key, got[s.Key], want)
			}
		}
		for _, r := range prof.Compare(got, got) {
			if r.Status == Applied {
				t.Fatalf("%s: %q before and after, counted as applied", r.Key, r.After)
			}
		}
	})
}
