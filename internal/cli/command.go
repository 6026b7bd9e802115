package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses both binaries use.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed
	ExitUsage   = 2 // bad input: a flag, an argument, a file, a field
	// A command SIGINT or SIGTERM stopped exits 130 or 143
	// (Interrupted.ExitCode), after its clean-up.
)

// ExitCoder is an error that chooses the exit status of the command it
// ended: UsageError (2), ExitError, Interrupted, and errors of other
// packages that are bad input (inventories.Error).
type ExitCoder interface{ ExitCode() int }

// ExitCode is 2: bad input.
func (e *UsageError) ExitCode() int { return ExitUsage }

// ExitError ends a command with a given exit status and one line.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// ExitCode is e.Code.
func (e *ExitError) ExitCode() int { return e.Code }

// NewRoot is a binary's root command: cobra parses every command's flags
// (their errors one line naming the flag, numeric ones checked against
// the ranges set with Ranged), `NAME version` and `NAME --version` print
// version, and help is generated from the tree (Help). Add the commands,
// then run it with Execute.
func NewRoot(name, short, version string, ios *IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:           name,
		Short:         short,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Every command's numeric flags are checked before it runs.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return CheckFlagRanges(cmd.Flags())
		},
	}
	root.SetIn(ios.In)
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	root.SetVersionTemplate(name + " {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return FlagError(err) })
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) { Help(cmd.OutOrStdout(), cmd) })
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "print the version of this build (also " + name + " --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(ios.Out, "%s %s\n", name, version)
			return err
		},
	})
	return root
}

// Group is a command that holds subcommands only: alone, or with a word
// that names none of them, it is a usage error that lists them.
func Group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var names []string
			for _, c := range cmd.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, c.Name())
				}
			}
			want := orList(names)
			if len(args) == 0 {
				return Usagef("want a subcommand: %s", want)
			}
			return Usagef("unknown subcommand %q (want %s)", args[0], want)
		},
	}
	g.AddCommand(subs...)
	return g
}

// NoArgs refuses positional arguments, naming the first.
func NoArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q", args[0])
	}
	return nil
}

// Execute runs the command line args on root and returns the exit
// status: 0, 1 when the command failed, 2 for bad input (anything cobra
// refused before the command ran, a UsageError, an ExitCoder's own), and
// 128+N when signal N ended the context (Interrupted). Every failure is
// one line on stderr, starting with the command's path.
func Execute(ctx context.Context, root *cobra.Command, args []string, ios *IOStreams) int {
	if len(args) == 0 {
		Help(ios.Out, root)
		return ExitUsage
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.Short = "shell completion: " + root.Name() + " completion bash|zsh|fish|powershell"
		// cobra would print help for an unknown shell, and exit 0.
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return Usagef("unknown shell %q (want bash, zsh, fish or powershell)", args[0])
			}
			return cmd.Help()
		}
	}
	if !strings.HasPrefix(args[0], "-") && args[0] != cobra.ShellCompRequestCmd && args[0] != cobra.ShellCompNoDescRequestCmd {
		if c, _, err := root.Find(args[:1]); err != nil || c == root {
			fmt.Fprintf(ios.ErrOut, "%s: unknown command %q (try %s help)\n", root.Name(), args[0], root.Name())
			return ExitUsage
		}
	}
	// A command that ran and failed exits 1; what cobra refused before
	// any command ran (an argument count, a flag) is bad input.
	ran := false
	Walk(root, func(c *cobra.Command) {
		c.Flags().SortFlags = false // help lists them as declared
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				ran = true
				return run(cmd, args)
			}
		}
	})
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return ExitOK
	}
	name := root.Name()
	if c != nil {
		name = c.CommandPath()
	}
	var in *Interrupted
	if errors.As(context.Cause(ctx), &in) {
		// A signal stopped the command: say so, with what it was doing.
		if err.Error() == context.Canceled.Error() {
			fmt.Fprintf(ios.ErrOut, "%s: %s\n", name, in)
		} else {
			fmt.Fprintf(ios.ErrOut, "%s: %s (%s)\n", name, in, OneLine(err))
		}
		return in.ExitCode()
	}
	fmt.Fprintf(ios.ErrOut, "%s: %s\n", name, OneLine(err))
	var ec ExitCoder
	switch {
	case errors.As(err, &ec):
		return ec.ExitCode()
	case !ran:
		return ExitUsage
	}
	return ExitFailure
}

// Walk calls fn for c and every command under it.
func Walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		Walk(sub, fn)
	}
}

// Help writes cmd's help: for the root, the commands and what each does;
// for a group, its subcommands; for a command, its usage line, its long
// text and its flags, each spelled --name.
func Help(w io.Writer, cmd *cobra.Command) {
	list := func(title string) {
		fmt.Fprintf(w, "%s:\n", title)
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() || c.Name() == "completion" {
				fmt.Fprintf(w, "  %-10s %s\n", c.Name(), c.Short)
			}
		}
	}
	switch {
	case !cmd.HasParent():
		fmt.Fprintf(w, "usage: %s COMMAND [flags]\n\n", cmd.Name())
		list("commands")
		if cmd.Long != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.Long))
		}
		fmt.Fprintf(w, "\n%s COMMAND -h shows a command's flags.\n", cmd.Name())
	case cmd.HasAvailableSubCommands() && !hasOwnFlags(cmd):
		fmt.Fprintf(w, "usage: %s SUBCOMMAND [flags]\n\n%s\n\n", cmd.CommandPath(), cmd.Short)
		list("subcommands")
		fmt.Fprintf(w, "\n%s SUBCOMMAND -h shows its flags.\n", cmd.CommandPath())
	default:
		fmt.Fprintf(w, "usage: %s\n", strings.TrimSuffix(cmd.UseLine(), " [flags]")+" [flags]")
		if cmd.Long != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.Long))
		} else if cmd.Short != "" {
			fmt.Fprintf(w, "\n%s\n", cmd.Short)
		}
		// The flags in the order they were declared, -h aside.
		fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
		fs.SortFlags = false
		cmd.Flags().SortFlags = false
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				fs.AddFlag(f)
			}
		})
		fmt.Fprintf(w, "\nflags:\n%s", fs.FlagUsages())
		if cmd.HasAvailableSubCommands() { // a command that runs and has more (fleet token revoke)
			fmt.Fprintln(w)
			list("subcommands")
		}
	}
}

// hasOwnFlags reports whether cmd declares flags besides -h: a command
// that runs with flags and has subcommands too (fleet token and fleet
// token revoke) shows its flags, then its subcommands.
func hasOwnFlags(cmd *cobra.Command) bool {
	own := false
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) { own = own || f.Name != "help" })
	return own
}

// OneLine is err's text on one line.
func OneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	words = slices.Clone(words)
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
