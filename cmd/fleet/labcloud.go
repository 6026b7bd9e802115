package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	lcdigitalocean "github.com/relayfleet/relayfleet/infra/localcloud/digitalocean"
	lchcloud "github.com/relayfleet/relayfleet/infra/localcloud/hcloud"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// localCloudAPI is one provider API `fleet lab cloud` serves.
type localCloudAPI struct {
	mount string // the API's base path
	env   string // the variable that points fleet at it
	url   string // its value, with %s for the listen address
	token string // the variable or secret that holds the token
	new   func(localcloud.Machines, localcloud.Config) (http.Handler, io.Closer, error)
}

// localCloudAPIs are the APIs `fleet lab cloud` serves.
var localCloudAPIs = map[string]localCloudAPI{
	"hcloud": {"/v1", "HCLOUD_ENDPOINT", "http://%s/v1", "HCLOUD_TOKEN (or fleet secret set hcloud-token)",
		func(m localcloud.Machines, c localcloud.Config) (http.Handler, io.Closer, error) {
			s, err := lchcloud.New(m, c)
			if err != nil {
				return nil, nil, err
			}
			return s, s, nil
		}},
	"digitalocean": {"/v2", "DIGITALOCEAN_API_URL", "http://%s/", "DIGITALOCEAN_TOKEN (or fleet secret set digitalocean-token)",
		func(m localcloud.Machines, c localcloud.Config) (http.Handler, io.Closer, error) {
			s, err := lcdigitalocean.New(m, c)
			if err != nil {
				return nil, nil, err
			}
			return s, s, nil
		}},
}

// localCloudNames are the providers `fleet lab cloud` serves, sorted.
func localCloudNames() []string {
	return slices.Sorted(maps.Keys(localCloudAPIs))
}

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
		ValidArgs: localCloudNames(),
		Args: func(cmd *cobra.Command, args []string) error {
			if err := oneArg("a provider (hcloud or digitalocean)")(cmd, args); err != nil {
				return err
			}
			if _, ok := localCloudAPIs[args[0]]; !ok {
				names := localCloudNames()
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
	stdout := ios.Out
	api := localCloudAPIs[provider]
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
	logf := func(format string, args ...any) { fmt.Fprintf(ios.ErrOut, format+"\n", args...) }
	m := &localcloud.LabMachines{Lab: l, RAMScale: o.ramScale, Logf: logf}
	h, closer, err := api.new(m, localcloud.Config{StateFile: o.stateFile, Token: token, Logf: logf})
	if err != nil {
		return err
	}
	defer closer.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the lab bridge's address exists once a lab box runs)", o.listen, err)
	}
	how := "read from"
	if created {
		how = "new, in"
	}
	fmt.Fprintf(stdout, "local %s API on %s (lab %s, state %s); token %s %s\n", provider, fmt.Sprintf(api.url, ln.Addr()), l.Dir(), o.stateFile, how, o.tokenFile)
	fmt.Fprintf(stdout, "point fleet at it:\n  export %s=%s\n  token: %s = the contents of %s\n", api.env, fmt.Sprintf(api.url, ln.Addr()), api.token, o.tokenFile)
	return localcloud.Serve(ctx, ln, api.mount, h)
}
