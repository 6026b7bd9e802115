package main

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/providers"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// labCloudOpts are the flags of `fleet lab cloud`.
type labCloudOpts struct {
	labOpts
	listen, stateFile, tokenFile string
	ramScale                     float64
}

// labCloudCommand is `fleet lab cloud PROVIDER`: the provider's API on
// this machine, backed by lab boxes (package infra/localcloud).
func labCloudCommand(ios *cli.IOStreams) *cobra.Command {
	var o labCloudOpts
	cmd := &cobra.Command{
		Use:       "cloud hcloud|digitalocean --listen ADDR",
		Short:     "a cloud provider's API on this machine, its servers lab boxes",
		ValidArgs: providers.Names(),
		Args: func(cmd *cobra.Command, args []string) error {
			if err := oneArg("a provider (hcloud or digitalocean)")(cmd, args); err != nil {
				return err
			}
			if _, ok := providers.APIs[args[0]]; !ok {
				names := providers.Names()
				if args[0] == "digitalocean" {
					return usagef("fleet lab cloud digitalocean: not in this build yet (served: %s)", strings.Join(names, ", "))
				}
				return usagef("unknown provider %q: want %s", args[0], strings.Join(append(names, "digitalocean"), " or "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return labCloud(cmd.Context(), args[0], &o, ios)
		},
	}
	fs := cmd.Flags()
	o.labOpts.add(fs)
	fs.StringVar(&o.listen, "listen", "", "address to serve the API on: loopback (127.0.0.1:8780) or the lab bridge's address")
	fs.StringVar(&o.stateFile, "state", "", "the API's records (servers, actions, firewalls), JSON mode 0600 (default LABDIR/localcloud-PROVIDER.json)")
	fs.StringVar(&o.tokenFile, "token-file", "", "the API token, one line, mode 0600; made with a random token when missing (default LABDIR/localcloud-PROVIDER.token)")
	fs.Float64Var(&o.ramScale, "ram-scale", 0.25, "boxes get the server type's RAM times this, at least 256 MiB (0.25: a 4 GiB cx23 boots as a 1 GiB box); cores are capped at this machine's CPU count")
	cli.Ranged(fs, "ram-scale", cli.Floats(0.01, 1))
	return cmd
}

// labCloud serves provider's API until ctx ends.
func labCloud(ctx context.Context, provider string, o *labCloudOpts, ios *cli.IOStreams) error {
	if o.listen == "" {
		return usagef("flag --listen: want HOST:PORT, for example 127.0.0.1:8780")
	}
	if err := localcloud.CheckListen(o.listen, lab.DefaultSubnet.Addr().Next()); err != nil {
		return usagef("%s", err)
	}
	l, err := newLab(&o.labOpts, ios.ErrOut)
	if err != nil {
		return err
	}
	if o.stateFile == "" {
		o.stateFile = filepath.Join(l.Dir(), "localcloud-"+provider+".json")
	}
	if o.tokenFile == "" {
		o.tokenFile = filepath.Join(l.Dir(), "localcloud-"+provider+".token")
	}
	token, created, err := localcloud.TokenFile(o.tokenFile)
	if err != nil {
		return usagef("flag --token-file: %s", err)
	}
	return providers.Serve(ctx, provider, providers.Options{
		Lab: l, Listen: o.listen, RAMScale: o.ramScale,
		StateFile: o.stateFile, TokenFile: o.tokenFile, Token: token, Created: created,
		Out: ios.Out, Log: ios.ErrOut,
	})
}
