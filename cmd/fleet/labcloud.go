package main

import (
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/cli"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	lcdigitalocean "github.com/relayfleet/relayfleet/infra/localcloud/digitalocean"
	lchcloud "github.com/relayfleet/relayfleet/infra/localcloud/hcloud"
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

// labCloud is `fleet lab cloud PROVIDER`: the provider's API on this
// machine, backed by lab boxes (package infra/localcloud).
func labCloud(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	provider, rest, err := positional(args, "a provider (hcloud or digitalocean)")
	if err != nil {
		return err
	}
	fs, dir := labFlags("cloud hcloud|digitalocean --listen ADDR", stdout)
	listen := fs.String("listen", "", "address to serve the API on: loopback (127.0.0.1:8780) or the lab bridge's address")
	stateFile := fs.String("state", "", "the API's records (servers, actions, firewalls), JSON mode 0600 (default LABDIR/localcloud-PROVIDER.json)")
	tokenFile := fs.String("token-file", "", "the API token, one line, mode 0600; made with a random token when missing (default LABDIR/localcloud-PROVIDER.token)")
	ramScale := fs.Float64("ram-scale", 0.25, "boxes get the server type's RAM times this, at least 256 MiB (0.25: a 4 GiB cx23 boots as a 1 GiB box); cores are capped at this machine's CPU count")
	if err := fs.parse(rest); err != nil {
		return err
	}
	if provider == "" { // -h
		return nil
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range localCloudAPIs {
			if !yield(k) {
				return
			}
		}
	})
	api, ok := localCloudAPIs[provider]
	if !ok {
		if provider == "digitalocean" {
			return usagef("fleet lab cloud digitalocean: not in this build yet (served: %s)", strings.Join(names, ", "))
		}
		return usagef("unknown provider %q: want %s", provider, strings.Join(append(names, "digitalocean"), " or "))
	}
	if *listen == "" {
		return usagef("flag --listen: want HOST:PORT, for example 127.0.0.1:8780")
	}
	if *ramScale <= 0 || *ramScale > 1 {
		return usagef("flag --ram-scale: want more than 0 and at most 1, got %g", *ramScale)
	}
	if err := localcloud.CheckListen(*listen, lab.DefaultSubnet.Addr().Next()); err != nil {
		return usagef("%s", err)
	}
	l, err := newLab(dir, ios.ErrOut)
	if err != nil {
		return err
	}
	if *stateFile == "" {
		*stateFile = filepath.Join(l.Dir(), "localcloud-"+provider+".json")
	}
	if *tokenFile == "" {
		*tokenFile = filepath.Join(l.Dir(), "localcloud-"+provider+".token")
	}
	token, created, err := localcloud.TokenFile(*tokenFile)
	if err != nil {
		return usagef("flag --token-file: %s", err)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(ios.ErrOut, format+"\n", args...) }
	m := &localcloud.LabMachines{Lab: l, RAMScale: *ramScale, Logf: logf}
	h, closer, err := api.new(m, localcloud.Config{StateFile: *stateFile, Token: token, Logf: logf})
	if err != nil {
		return err
	}
	defer closer.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the lab bridge's address exists once a lab box runs)", *listen, err)
	}
	how := "read from"
	if created {
		how = "new, in"
	}
	fmt.Fprintf(stdout, "local %s API on %s (lab %s, state %s); token %s %s\n", provider, fmt.Sprintf(api.url, ln.Addr()), l.Dir(), *stateFile, how, *tokenFile)
	fmt.Fprintf(stdout, "point fleet at it:\n  export %s=%s\n  token: %s = the contents of %s\n", api.env, fmt.Sprintf(api.url, ln.Addr()), api.token, *tokenFile)
	return localcloud.Serve(ctx, ln, api.mount, h)
}
