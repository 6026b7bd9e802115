package providers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// CheckName is nil when fleet lab cloud serves provider (APIs), else a
// cli usage error naming those it serves.
func CheckName(provider string) error {
	if _, ok := APIs[provider]; ok {
		return nil
	}
	names := Names()
	if provider == "digitalocean" {
		return cli.Usagef("fleet lab cloud digitalocean: not in this build yet (served: %s)", strings.Join(names, ", "))
	}
	return cli.Usagef("unknown provider %q: want %s", provider, strings.Join(append(names, "digitalocean"), " or "))
}

// LabOptions are fleet lab cloud's inputs, as its flags give them.
type LabOptions struct {
	// Lab is the lab whose boxes are the servers.
	Lab lab.Options
	// Listen is HOST:PORT (required): loopback or the lab bridge's address.
	Listen string
	// StateFile and TokenFile are Options's ("": in the lab's directory,
	// named after the provider); the token is made when the file is missing.
	StateFile, TokenFile string
	RAMScale             float64
	// FaultsFile ("": none) is the faults the API injects (package
	// faults), read again whenever it changes; it must exist and be good
	// at the start.
	FaultsFile string
	// RequestsFile ("": none) gets the counts of the requests answered
	// (localcloud.RequestCounts), after each one.
	RequestsFile string
}

// ServeLab is fleet lab cloud PROVIDER: it checks o, opens the lab and
// serves provider's API (Serve) until ctx ends; where it is goes to
// ios.Out, the lab's progress and the API's log to ios.ErrOut. Errors in
// what the flags gave are cli usage errors.
func ServeLab(ctx context.Context, provider string, o LabOptions, ios *cli.IOStreams) error {
	if o.Listen == "" {
		return cli.Usagef("flag --listen: want HOST:PORT, for example 127.0.0.1:8780")
	}
	if err := localcloud.CheckListen(o.Listen, lab.DefaultSubnet.Addr().Next()); err != nil {
		return cli.Usagef("%s", err)
	}
	var ff *faults.File
	if o.FaultsFile != "" {
		var err error
		ff, err = faults.Open(o.FaultsFile, func(format string, args ...any) { fmt.Fprintf(ios.ErrOut, format+"\n", args...) })
		if err != nil {
			return cli.Usagef("flag --faults: %s", err)
		}
	}
	if o.RequestsFile != "" {
		if st, err := os.Stat(filepath.Dir(o.RequestsFile)); err != nil || !st.IsDir() {
			return cli.Usagef("flag --requests %s: no directory %s to write it in", o.RequestsFile, filepath.Dir(o.RequestsFile))
		}
	}
	l, err := lab.Open(o.Lab, ios.ErrOut)
	if err != nil {
		return err
	}
	if o.StateFile == "" {
		o.StateFile = filepath.Join(l.Dir(), "localcloud-"+provider+".json")
	}
	if o.TokenFile == "" {
		o.TokenFile = filepath.Join(l.Dir(), "localcloud-"+provider+".token")
	}
	token, created, err := localcloud.TokenFile(o.TokenFile)
	if err != nil {
		return cli.Usagef("flag --token-file: %s", err)
	}
	return Serve(ctx, provider, Options{
		Lab: l, Listen: o.Listen, RAMScale: o.RAMScale,
		StateFile: o.StateFile, TokenFile: o.TokenFile, Token: token, Created: created,
		Faults: ff, RequestsFile: o.RequestsFile,
		Out: ios.Out, Log: ios.ErrOut,
	})
}
