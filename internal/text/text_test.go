package text

import (
	"errors"
	"os/exec"
	"testing"
)

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 boxes"}, {1, "1 box"}, {2, "2 boxes"}, {1000, "1,000 boxes"}, {-1234567, "-1,234,567 boxes"}} {
		if got := Plural(tc.n, "box", "boxes"); got != tc.want {
			t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestShortSHA(t *testing.T) {
	for in, want := range map[string]string{"": "(none)", "abc": "abc", "0123456789abcdef": "0123456789ab"} {
		if got := ShortSHA(in); got != want {
			t.Errorf("ShortSHA(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOneLineAndSquash(t *testing.T) {
	if got := OneLine(errors.New("a\nb\nc")); got != "a; b; c" {
		t.Errorf("OneLine = %q", got)
	}
	if got := Squash("  <html>\n\t<body>  x </body>\n"); got != "<html> <body> x </body>" {
		t.Errorf("Squash = %q", got)
	}
}

// TestShellQuote: the shell reads each quoted word back as it was.
func TestShellQuote(t *testing.T) {
	for _, s := range []string{"", "plain", "it's", `a "b" $HOME; rm -rf / 'x'`, "new\nline"} {
		out, err := exec.Command("sh", "-c", "printf %s "+ShellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh printf %s = %q, %v; want %q", ShellQuote(s), out, err, s)
		}
	}
}

func TestDash(t *testing.T) {
	if got := Dash(""); got != "-" {
		t.Errorf("Dash(\"\") = %q", got)
	}
	if got := Dash("x"); got != "x" {
		t.Errorf("Dash(\"x\") = %q", got)
	}
}
