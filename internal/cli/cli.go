// Package cli is the command-line plumbing the fleet and relay binaries
// share: the streams a command reads and writes (IOStreams, with terminal
// detection that asks the terminal, so /dev/null is not one), flag errors
// as one line naming the flag, and ranges every numeric flag is checked
// against.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// IOStreams are a command's stdin, stdout and stderr, passed in rather
// than read from globals.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// System is the process's own streams.
func System() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// InTerminal says whether a person types at In.
func (s *IOStreams) InTerminal() bool { return IsTerminal(s.In) }

// OutTerminal says whether Out shows on a terminal (live progress lines).
func (s *IOStreams) OutTerminal() bool { return IsTerminal(s.Out) }

// IsTerminal says whether v (a stream) is a terminal: it must have a file
// descriptor that answers the terminal ioctl. /dev/null, a character
// device too, does not.
func IsTerminal(v any) bool {
	f, ok := v.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// UsageError is bad input from the user (a flag, an argument, a file):
// the binaries exit with status 2 and print its one line.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// NewFlagSet is a pflag set that prints nothing itself: its errors come
// back from Parse, -h as pflag.ErrHelp. Every flag is --name; a one-letter
// name also answers to -n.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// FlagError rewrites pflag's parse errors as one line naming the flag:
// "flag --n: invalid value "x": ...", "flag --n: unknown flag",
// "flag --n: needs a value".
func FlagError(err error) error {
	var inv *pflag.InvalidValueError
	var notExist *pflag.NotExistError
	var needs *pflag.ValueRequiredError
	switch {
	case errors.As(err, &inv):
		return Usagef("flag --%s: invalid value %q: %s", inv.GetFlag().Name, inv.GetValue(), causeText(inv.Unwrap()))
	case errors.As(err, &notExist):
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			return Usagef("flag -%s: unknown flag (flags are spelled --name)", s)
		}
		return Usagef("flag --%s: unknown flag", notExist.GetSpecifiedName())
	case errors.As(err, &needs):
		if f := needs.GetFlag(); f != nil {
			return Usagef("flag --%s: needs a value", f.Name)
		}
		return Usagef("flag --%s: needs a value", needs.GetSpecifiedName())
	}
	return Usagef("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
}

// causeText shortens the parsers' errors: strconv's "strconv.ParseInt:
// parsing "x": invalid syntax" to "invalid syntax", time's to what a
// duration looks like.
func causeText(err error) string {
	if err == nil {
		return "bad value"
	}
	s := err.Error()
	switch {
	case strings.HasPrefix(s, "strconv."):
		if i := strings.LastIndex(s, ": "); i >= 0 {
			s = s[i+2:]
		}
	case strings.HasPrefix(s, "time: "):
		s = "want a duration such as 500ms, 30s, 5m or 1h"
	}
	return s
}

// GoValue lets a flag.Value (String and Set) serve as a pflag.Value.
func GoValue(v flag.Value) pflag.Value {
	if pv, ok := v.(pflag.Value); ok {
		return pv
	}
	return goValue{v}
}

type goValue struct{ flag.Value }

func (goValue) Type() string { return "value" }
