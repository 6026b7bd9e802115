package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// secretKeys maps fleet secret names to the provider's configuration keys.
var secretKeys = map[string]string{
	"hcloud-token":       program.HcloudTokenKey,
	"digitalocean-token": program.DigitalOceanTokenKey,
}

// runSecret is fleet secret set NAME: the value is read from stdin (never
// a command line) and kept encrypted in the fleet's stack configuration,
// where the provider reads it; event stacks get it from there.
func runSecret(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	if len(args) < 2 || args[0] != "set" {
		return usagef("want set NAME, as in: fleet secret set hcloud-token --inventory FILE < token-file (NAME: hcloud-token or digitalocean-token)")
	}
	key, ok := secretKeys[args[1]]
	if !ok {
		return usagef("unknown secret %q (want hcloud-token or digitalocean-token)", args[1])
	}
	s := newStackFlags("secret set", stdout, false)
	st, err := s.parse(args[2:], io.Discard)
	if err != nil {
		return err
	}
	if ios.InTerminal() {
		return usagef("the %s is read from stdin: pipe it in (fleet secret set %s --inventory FILE < token-file), so it never shows on a terminal or a command line", args[1], args[1])
	}
	line, err := bufio.NewReader(io.LimitReader(cli.ContextReader(ctx, ios.In), 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read %s from stdin: %w", args[1], err)
	}
	value := strings.TrimSpace(line)
	if value == "" {
		return usagef("stdin: empty %s", args[1])
	}
	if strings.ContainsAny(value, " \t") {
		return usagef("stdin: the %s has spaces in it; want the token alone", args[1])
	}
	if err := st.SetSecret(ctx, key, value); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "secret %s kept encrypted in stack %s (relayfleet:%s); fleet up and fleet events use it\n", args[1], st.Name, key)
	return nil
}
