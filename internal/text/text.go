// Package text holds the small wording helpers the commands and packages
// share: counts with their noun, a release's short hash, a multi-line
// error or response body on one line, and a shell word. It imports
// nothing else of the module, so that relay may use it too.
package text

import (
	"fmt"
	"strings"
)

// Plural writes a count with the noun that fits it: 1 box, 2 boxes.
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ShortSHA is a release's SHA-256 shortened to 12 hex digits, "(none)"
// when there is none.
func ShortSHA(sha string) string {
	switch {
	case sha == "":
		return "(none)"
	case len(sha) > 12:
		return sha[:12]
	}
	return sha
}

// OneLine is an error's text on one line: its lines joined with "; ".
func OneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// Squash is s with every run of white space, newlines among them, made
// one space: a response body quoted in an error.
func Squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// ShellQuote makes s one single-quoted shell word.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
