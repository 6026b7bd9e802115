// Package bpath holds the relay's and the client's one set of broadcast
// path functions. A path is its segments, the non-empty parts between
// slashes; ".." and "." are ordinary segment names, as in @moq/lite,
// because a path is only a key and is never resolved against anything.
package bpath

import "strings"

// Clean normalizes a broadcast path the way @moq/lite's Path.from does:
// repeated slashes collapse and leading and trailing slashes go.
func Clean(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return strings.Trim(p, "/")
}

// Join joins two cleaned paths.
func Join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// HasPrefix reports whether the cleaned path is prefix or below it, on
// segment boundaries ("foo" is not a prefix of "foobar").
func HasPrefix(prefix, path string) bool {
	if prefix == "" || path == prefix {
		return true
	}
	return strings.HasPrefix(path, prefix) && path[len(prefix)] == '/'
}

// StripPrefix returns the cleaned path relative to prefix; ok is false
// when path is not under prefix.
func StripPrefix(prefix, path string) (rest string, ok bool) {
	if !HasPrefix(prefix, path) {
		return "", false
	}
	if prefix == "" {
		return path, true
	}
	if path == prefix {
		return "", true
	}
	return path[len(prefix)+1:], true
}
