// Package providers is the cloud provider APIs fleet lab cloud serves on
// this machine, by name, each backed by lab boxes (package
// infra/localcloud), and Serve, which serves one; ServeLab is fleet lab
// cloud's body.
package providers

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	lcdigitalocean "github.com/relayfleet/relayfleet/infra/localcloud/digitalocean"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	lchcloud "github.com/relayfleet/relayfleet/infra/localcloud/hcloud"
)

// API is one provider API fleet lab cloud serves.
type API struct {
	Mount string // the API's base path
	Env   string // the variable that points fleet at it
	URL   string // its value, with %s for the listen address
	Token string // the variable or secret that holds the token
	// New makes the API's handler, and what closes it.
	New func(localcloud.Machines, localcloud.Config) (http.Handler, io.Closer, error)
}

// APIs are the APIs fleet lab cloud serves, by provider name.
var APIs = map[string]API{
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

// Names are the providers in APIs, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(APIs))
}

// Options say how Serve serves an API.
type Options struct {
	Lab      *lab.Lab
	Listen   string  // HOST:PORT
	RAMScale float64 // boxes get a server type's RAM times this
	// StateFile holds the API's records; TokenFile its token, Token,
	// which Created says was made just now.
	StateFile, TokenFile, Token string
	Created                     bool
	// Faults (nil: none) and RequestsFile ("": none) are
	// localcloud.Config's.
	Faults       *faults.File
	RequestsFile string
	// Out gets where the API is and how to point fleet at it; Log the
	// API's log.
	Out, Log io.Writer
}

// Serve serves provider's API (one of APIs) on o.Listen until ctx ends.
func Serve(ctx context.Context, provider string, o Options) error {
	api, ok := APIs[provider]
	if !ok {
		return fmt.Errorf("no local %s API", provider)
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, format+"\n", args...) }
	m := &localcloud.LabMachines{Lab: o.Lab, RAMScale: o.RAMScale, Logf: logf}
	h, closer, err := api.New(m, localcloud.Config{StateFile: o.StateFile, Token: o.Token, Logf: logf, Faults: o.Faults, RequestsFile: o.RequestsFile})
	if err != nil {
		return err
	}
	defer closer.Close()
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the lab bridge's address exists once a lab box runs)", o.Listen, err)
	}
	how := "read from"
	if o.Created {
		how = "new, in"
	}
	fmt.Fprintf(o.Out, "local %s API on %s (lab %s, state %s); token %s %s\n", provider, fmt.Sprintf(api.URL, ln.Addr()), o.Lab.Dir(), o.StateFile, how, o.TokenFile)
	fmt.Fprintf(o.Out, "point fleet at it:\n  export %s=%s\n  token: %s = the contents of %s\n", api.Env, fmt.Sprintf(api.URL, ln.Addr()), api.Token, o.TokenFile)
	if o.Faults != nil {
		fmt.Fprintf(o.Out, "faults from %s (%s), read again when it changes\n", o.Faults.Path(), o.Faults.Current())
	}
	if o.RequestsFile != "" {
		fmt.Fprintf(o.Out, "request counts in %s\n", o.RequestsFile)
	}
	return localcloud.Serve(ctx, ln, api.Mount, h)
}
