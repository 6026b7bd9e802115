package relay

import "strings"

// cleanPath normalizes a broadcast path the way @moq/lite's Path.from does:
// repeated slashes collapse and leading and trailing slashes go.
func cleanPath(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return strings.Trim(p, "/")
}

// joinPath joins two cleaned paths.
func joinPath(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// hasPathPrefix reports whether path is prefix or below it, on segment
// boundaries ("foo" is not a prefix of "foobar").
func hasPathPrefix(prefix, path string) bool {
	if prefix == "" || path == prefix {
		return true
	}
	return strings.HasPrefix(path, prefix) && path[len(prefix)] == '/'
}

// stripPathPrefix returns path relative to prefix; ok is false when path is
// not under prefix.
func stripPathPrefix(prefix, path string) (string, bool) {
	if !hasPathPrefix(prefix, path) {
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
