// Package text holds the small wording helpers the commands and packages
// share: counts with their noun, a release's short hash, a multi-line
// error or response body on one line, and a shell word. It imports
// nothing else of the module, so that relay may use it too.
package text

import (
	"strconv"
	"strings"
)

// Plural writes a count, with comma separators, and the noun that fits
// it: 1 box, 2 boxes, 10,000 listeners.
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return Count(n) + " " + many
}

// Count writes a listener count with comma separators: 100,000.
func Count(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
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

// Dash is s, or "-" when s is empty: a table's empty cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
