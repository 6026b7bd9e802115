package bpath

import (
	"slices"
	"strings"
	"testing"
)

// segments is the reference for broadcast paths: the non-empty parts
// between slashes. A path is its segments; ".." and "." are ordinary
// segment names, as in @moq/lite, because the relay never resolves a path
// against anything: a path is only a key, so "live/.." is a broadcast
// under "live", not the root.
func segments(p string) []string {
	var out []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// FuzzPath checks Clean, HasPrefix, StripPrefix and Join against the
// segment reference: cleaning keeps exactly the segments and is
// idempotent, and prefix matching is segment-wise, so "foo" is never a
// prefix of "foobar" however slashes are placed.
func FuzzPath(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"/", "//"}, {"a", "a"}, {"a", "a/b"}, {"foo", "foobar"}, {"foo/", "/foo//bar/"},
		{"live/room1", "live/room1/../room2"}, {"..", "../x"}, {"a/b", "a"}, {"é/ü", "é/ü/x"}, {"a//b", "a/b/c"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rawPrefix, rawPath string) {
		for _, raw := range []string{rawPrefix, rawPath} {
			c := Clean(raw)
			if want := strings.Join(segments(raw), "/"); c != want {
				t.Fatalf("Clean(%q) = %q, want %q", raw, c, want)
			}
			if cc := Clean(c); cc != c {
				t.Fatalf("Clean not idempotent: %q -> %q -> %q", raw, c, cc)
			}
			if strings.Contains(c, "//") || strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") {
				t.Fatalf("Clean(%q) = %q: empty segment or slash at an end", raw, c)
			}
		}
		prefix, path := Clean(rawPrefix), Clean(rawPath)
		ps, ss := segments(prefix), segments(path)
		want := len(ps) <= len(ss) && slices.Equal(ps, ss[:len(ps)])
		if got := HasPrefix(prefix, path); got != want {
			t.Fatalf("HasPrefix(%q, %q) = %v, want %v", prefix, path, got, want)
		}
		rest, ok := StripPrefix(prefix, path)
		if ok != want {
			t.Fatalf("StripPrefix(%q, %q) ok = %v, want %v", prefix, path, ok, want)
		}
		if !ok {
			return
		}
		if w := strings.Join(ss[len(ps):], "/"); rest != w {
			t.Fatalf("StripPrefix(%q, %q) = %q, want %q", prefix, path, rest, w)
		}
		if j := Join(prefix, rest); j != path {
			t.Fatalf("Join(%q, %q) = %q, want %q", prefix, rest, j, path)
		}
	})
}
