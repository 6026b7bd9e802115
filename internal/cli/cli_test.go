package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if IsTerminal(null) {
		t.Error("IsTerminal(/dev/null) = true: a character device is not a terminal")
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("IsTerminal(buffer) = true")
	}
	if (&IOStreams{In: null, Out: null}).InTerminal() {
		t.Error("InTerminal with /dev/null = true")
	}
	// The other side: a pseudo-terminal is one.
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		testutil.Skipf(t, "no pseudo-terminal to check the other side: %v", err)
	}
	defer ptm.Close()
	if !IsTerminal(ptm) || !(&IOStreams{Out: ptm}).OutTerminal() {
		t.Error("IsTerminal(/dev/ptmx) = false")
	}
}

func TestFlagError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--n", "x"}, `flag --n: invalid value "x": invalid syntax`},
		{[]string{"--n=99999999999999999999"}, `flag --n: invalid value "99999999999999999999": value out of range`},
		{[]string{"--d", "soon"}, `flag --d: invalid value "soon": want a duration such as 500ms, 30s, 5m or 1h`},
		{[]string{"--nope"}, "flag --nope: unknown flag"},
		{[]string{"-nope"}, "flag -nope: unknown flag (flags are spelled --name)"},
		{[]string{"--n"}, "flag --n: needs a value"},
	} {
		fs := NewFlagSet("t")
		fs.Int("n", 0, "")
		fs.Duration("d", 0, "")
		err := fs.Parse(tc.args)
		if err == nil {
			t.Errorf("%q: parsed", tc.args)
			continue
		}
		if got := FlagError(err).Error(); got != tc.want {
			t.Errorf("%q: FlagError = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestCheckFlagRanges(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" passes
	}{
		{nil, ""}, // defaults (0, out of range) are not checked
		{[]string{"--n", "1", "--f", "1", "--d", "1h"}, ""},
		{[]string{"--n", "0"}, "flag --n: 0 is out of range: want 1 to 10"},
		{[]string{"--n", "99999999999999"}, "flag --n: 99999999999999 is out of range: want 1 to 10"},
		{[]string{"--f", "1.5"}, "flag --f: 1.5 is out of range: want 0 to 1"},
		{[]string{"--f", "NaN"}, "flag --f: NaN is out of range: want 0 to 1"},
		{[]string{"--d", "0s"}, "flag --d: 0s is out of range: want 1s to 1h"},
		{[]string{"--d", "2h"}, "flag --d: 2h0m0s is out of range: want 1s to 1h"},
		{[]string{"--u", "3"}, ""}, // no range: UnrangedFlags's to find
	} {
		fs := NewFlagSet("t")
		fs.Int("n", 0, "")
		fs.Float64("f", 0, "")
		fs.Duration("d", 0, "")
		fs.Uint("u", 0, "")
		Ranged(fs, "n", Ints(1, 10))
		Ranged(fs, "f", Floats(0, 1))
		Ranged(fs, "d", Durations(time.Second, time.Hour))
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if u := UnrangedFlags(fs); len(u) != 1 || u[0] != "--u" {
			t.Errorf("UnrangedFlags = %q, want [--u]", u)
		}
		err := CheckFlagRanges(fs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestGoValue(t *testing.T) {
	var s strings.Builder
	v := GoValue(stringValue{&s})
	if v.Type() != "value" {
		t.Errorf("Type = %q", v.Type())
	}
	if err := v.Set("x"); err != nil || s.String() != "x" {
		t.Errorf("Set: %v, %q", err, s.String())
	}
}

type stringValue struct{ b *strings.Builder }

func (v stringValue) String() string {
	if v.b == nil {
		return ""
	}
	return v.b.String()
}
func (v stringValue) Set(s string) error { v.b.WriteString(s); return nil }
