package relay

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

// FuzzPath checks cleanPath, hasPathPrefix, stripPathPrefix and joinPath
// against the segment reference: cleaning keeps exactly the segments and is
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
			c := cleanPath(raw)
			if want := strings.Join(segments(raw), "/"); c != want {
				t.Fatalf("cleanPath(%q) = %q, want %q", raw, c, want)
			}
			if cc := cleanPath(c); cc != c {
				t.Fatalf("cleanPath not idempotent: %q -> %q -> %q", raw, c, cc)
			}
			if strings.Contains(c, "//") || strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") {
				t.Fatalf("cleanPath(%q) = %q: empty segment or slash at an end", raw, c)
			}
		}
		prefix, path := cleanPath(rawPrefix), cleanPath(rawPath)
		ps, ss := segments(prefix), segments(path)
		want := len(ps) <= len(ss) && slices.Equal(ps, ss[:len(ps)])
		if got := hasPathPrefix(prefix, path); got != want {
			t.Fatalf("hasPathPrefix(%q, %q) = %v, want %v", prefix, path, got, want)
		}
		rest, ok := stripPathPrefix(prefix, path)
		if ok != want {
			t.Fatalf("stripPathPrefix(%q, %q) ok = %v, want %v", prefix, path, ok, want)
		}
		if !ok {
			return
		}
		if w := strings.Join(ss[len(ps):], "/"); rest != w {
			t.Fatalf("stripPathPrefix(%q, %q) = %q, want %q", prefix, path, rest, w)
		}
		if j := joinPath(prefix, rest); j != path {
			t.Fatalf("joinPath(%q, %q) = %q, want %q", prefix, rest, j, path)
		}
	})
}
