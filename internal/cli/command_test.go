package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// testTree is a root "t" with a command "count" (--n ranged 1 to 10,
// --wait ranged 1s to 1m, no arguments), a group "grp" with "sub", and
// "fail", which returns the error given.
func testTree(ios *IOStreams, failWith error) *cobra.Command {
	root := NewRoot("t", "a test tool", "v1.2.3", ios)
	count := &cobra.Command{Use: "count", Short: "count to n", Args: NoArgs,
		RunE: func(*cobra.Command, []string) error { return nil }}
	count.Flags().Int("n", 1, "how far")
	count.Flags().Duration("wait", time.Second, "how long")
	Ranged(count.Flags(), "n", Ints(1, 10))
	Ranged(count.Flags(), "wait", Durations(time.Second, time.Minute))
	sub := &cobra.Command{Use: "sub NAME", Short: "a subcommand", Args: cobra.ExactArgs(1),
		RunE: func(*cobra.Command, []string) error { return nil }}
	fail := &cobra.Command{Use: "fail", Short: "fails", RunE: func(*cobra.Command, []string) error { return failWith }}
	root.AddCommand(count, Group("grp", "a group", sub), fail)
	return root
}

func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		failWith  error
		code      int
		out, err_ string // substrings; err_ "" means stderr empty
	}{
		{[]string{"count", "--n", "3"}, nil, 0, "", ""},
		{[]string{"count", "--n", "11"}, nil, 2, "", "t count: flag --n: 11 is out of range: want 1 to 10\n"},
		{[]string{"count", "--wait", "2m"}, nil, 2, "", "t count: flag --wait: 2m0s is out of range: want 1s to 1m\n"},
		{[]string{"count", "--n", "x"}, nil, 2, "", "t count: flag --n: invalid value \"x\": invalid syntax\n"},
		{[]string{"count", "extra"}, nil, 2, "", "t count: unexpected argument \"extra\"\n"},
		{[]string{"count", "-n", "3"}, nil, 2, "", "t count: flag -n: unknown flag (flags are spelled --name)\n"},
		{[]string{"nope"}, nil, 2, "", "t: unknown command \"nope\" (try t help)\n"},
		{[]string{"grp"}, nil, 2, "", "t grp: want a subcommand: sub\n"},
		{[]string{"grp", "nope"}, nil, 2, "", "t grp: unknown subcommand \"nope\" (want sub)\n"},
		{[]string{"grp", "sub"}, nil, 2, "", "t grp sub: accepts 1 arg(s), received 0\n"},
		{[]string{"grp", "sub", "x"}, nil, 0, "", ""},
		{[]string{"fail"}, errors.New("it broke\nbadly"), 1, "", "t fail: it broke; badly\n"},
		{[]string{"fail"}, Usagef("bad input"), 2, "", "t fail: bad input\n"},
		{[]string{"fail"}, &ExitError{Code: 3, Msg: "some hosts failed"}, 3, "", "t fail: some hosts failed\n"},
		{[]string{"version"}, nil, 0, "t v1.2.3\n", ""},
		{[]string{"--version"}, nil, 0, "t v1.2.3\n", ""},
		{[]string{"count", "-h"}, nil, 0, "usage: t count [flags]\n\ncount to n\n\nflags:\n      --n int", ""},
		{[]string{"help", "count"}, nil, 0, "usage: t count [flags]\n\ncount to n\n\nflags:\n      --n int", ""},
		{[]string{"grp", "-h"}, nil, 0, "usage: t grp SUBCOMMAND [flags]\n\na group\n\nsubcommands:\n  sub", ""},
		{[]string{"grp", "sub", "-h"}, nil, 0, "usage: t grp sub NAME [flags]", ""},
		{[]string{"-h"}, nil, 0, "usage: t COMMAND [flags]\n\ncommands:\n", ""},
		{nil, nil, 2, "usage: t COMMAND [flags]", ""},
		{[]string{"completion", "tcsh"}, nil, 2, "", "t completion: unknown shell \"tcsh\" (want bash, zsh, fish or powershell)\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			ios := &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}
			code := Execute(context.Background(), testTree(ios, tc.failWith), tc.args, ios)
			if code != tc.code || !strings.Contains(out.String(), tc.out) || (tc.err_ == "" && errb.Len() > 0) || !strings.Contains(errb.String(), tc.err_) {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout with %q, stderr %q", code, out.String(), errb.String(), tc.code, tc.out, tc.err_)
			}
		})
	}
}

// TestExecuteInterrupted: a command a signal stopped exits 128+N with a
// line saying so.
func TestExecuteInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&Interrupted{Signal: syscall.SIGTERM})
	var out, errb bytes.Buffer
	ios := &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}
	code := Execute(ctx, testTree(ios, context.Canceled), []string{"fail"}, ios)
	if code != 143 || errb.String() != "t fail: interrupted by SIGTERM\n" {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestCompletionFromTheTree: subcommands and flags complete from the
// declarations, nothing runs.
func TestCompletionFromTheTree(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "gr"}, "grp\ta group"},
		{[]string{"__complete", "grp", ""}, "sub\ta subcommand"},
		{[]string{"__complete", "count", "--w"}, "--wait\thow long"},
	} {
		var out, errb bytes.Buffer
		ios := &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}
		if code := Execute(context.Background(), testTree(ios, nil), tc.args, ios); code != 0 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out.String(), errb.String(), tc.want)
		}
	}
}

// TestEveryFlagOfTheTreeIsRanged is how a binary holds every numeric flag
// to a range: UnrangedFlags finds one without.
func TestUnrangedFlags(t *testing.T) {
	ios := &IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}
	root := testTree(ios, nil)
	c, _, _ := root.Find([]string{"count"})
	if u := UnrangedFlags(c.Flags()); len(u) != 0 {
		t.Errorf("count: unranged %q", u)
	}
	c.Flags().Int("more", 0, "unranged")
	if u := UnrangedFlags(c.Flags()); len(u) != 1 || u[0] != "--more" {
		t.Errorf("count with --more: unranged %q, want [--more]", u)
	}
}
