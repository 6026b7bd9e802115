package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// secretKeys maps fleet secret names to the provider's configuration keys.
var secretKeys = map[string]string{
	"hcloud-token":       program.HcloudTokenKey,
	"digitalocean-token": program.DigitalOceanTokenKey,
}

// secretCommand is fleet secret set NAME.
func secretCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "keep a cloud token (NAME: hcloud-token or digitalocean-token) encrypted in the fleet's stack; the value is read from stdin",
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return []cobra.Completion{"hcloud-token", "digitalocean-token"}, cobra.ShellCompDirectiveNoFileComp
		},
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("want NAME, as in: fleet secret set hcloud-token --inventory FILE < token-file (NAME: hcloud-token or digitalocean-token)")
			case secretKeys[args[0]] == "":
				return usagef("unknown secret %q (want hcloud-token or digitalocean-token)", args[0])
			case len(args) > 1:
				return usagef("unexpected argument %q", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSecretSet(cmd.Context(), args[0], &s, ios)
		},
	}
	s.add(set.Flags(), false)
	return cli.Group("secret", "keep a cloud token encrypted in the fleet's stack: set hcloud-token | digitalocean-token (value on stdin)", set)
}

// runSecretSet is fleet secret set NAME: the value is read from stdin
// (never a command line) and kept encrypted in the fleet's stack
// configuration, where the provider reads it; event stacks get it from
// there.
func runSecretSet(ctx context.Context, name string, s *stackFlags, ios *cli.IOStreams) error {
	stdout := ios.Out
	key := secretKeys[name]
	st, err := s.load(io.Discard)
	if err != nil {
		return err
	}
	if ios.InTerminal() {
		return usagef("the %s is read from stdin: pipe it in (fleet secret set %s --inventory FILE < token-file), so it never shows on a terminal or a command line", name, name)
	}
	line, err := bufio.NewReader(io.LimitReader(cli.ContextReader(ctx, ios.In), 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read %s from stdin: %w", name, err)
	}
	value := strings.TrimSpace(line)
	if value == "" {
		return usagef("stdin: empty %s", name)
	}
	if strings.ContainsAny(value, " \t") {
		return usagef("stdin: the %s has spaces in it; want the token alone", name)
	}
	if err := st.SetSecret(ctx, key, value); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "secret %s kept encrypted in stack %s (relayfleet:%s); fleet up and fleet events use it\n", name, st.Name, key)
	return nil
}
