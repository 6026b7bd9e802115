package main

import (
	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// secretCommand is fleet secret set NAME (program.SetSecret).
func secretCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var lf lockFlags
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "keep a cloud token (NAME: hcloud-token or digitalocean-token) encrypted in the fleet's stack; the value is read from stdin",
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return program.SecretCompletions(args), cobra.ShellCompDirectiveNoFileComp
		},
		Args: func(_ *cobra.Command, args []string) error { return program.CheckSecretArgs(args) },
		RunE: func(cmd *cobra.Command, args []string) error {
			e := s.env(ios)
			e.Lock = lf.locker(ios, cmd)
			return lf.result(program.SetSecret(cmd.Context(), e, args[0]))
		},
	}
	s.add(set.Flags(), false)
	lf.add(set.Flags())
	return cli.Group("secret", "keep a cloud token encrypted in the fleet's stack: set hcloud-token | digitalocean-token (value on stdin)", set)
}
