package main

import (
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/units"
)

// keyStore keeps the fleet's relay auth key file (program.KeyStore).
// Tests replace openKeyStore.
type keyStore = program.KeyStore

var openKeyStore = func(st *program.Stack) keyStore { return st }

// clock is the time the auth commands work with; tests replace it.
var clock = time.Now

// Token lifetimes fleet token accepts.
const (
	defaultTokenTTL = time.Hour
	maxTokenTTL     = 30 * 24 * time.Hour
)

// fleetAuthKeys is program.FleetAuthKeys at the auth commands' clock.
func fleetAuthKeys(ctx context.Context, ks keyStore, create bool) (string, []provision.AuthKey, error) {
	return program.FleetAuthKeys(ctx, ks, clock(), create)
}

// tokenCommand is fleet token: a token signed with the fleet's key,
// --inventory FILE (--publish PREFIX | --subscribe PREFIX) [--ttl D].
func tokenCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var pub, sub string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token",
		Short: "mint a relay token signed with the fleet's key: --publish PREFIX | --subscribe PREFIX [--ttl D]",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runToken(cmd.Context(), cmd.Flags(), &s, pub, sub, ttl, ios)
		},
	}
	fs := cmd.Flags()
	s.add(fs, false)
	fs.StringVar(&pub, "publish", "", "broadcast path prefix the token may publish under")
	fs.StringVar(&sub, "subscribe", "", "broadcast path prefix the token may subscribe under")
	fs.DurationVar(&ttl, "ttl", defaultTokenTTL, "how long the token is valid (at most 720h)")
	cli.Ranged(fs, "ttl", cli.Durations(time.Second, maxTokenTTL))
	return cmd
}

// runToken mints the token; fs says which of --publish and --subscribe
// were given.
func runToken(ctx context.Context, fs *pflag.FlagSet, s *stackFlags, pub, sub string, ttl time.Duration, ios *cli.IOStreams) error {
	st, err := s.load(io.Discard)
	if err != nil {
		return err
	}
	publish, subscribe := fs.Changed("publish"), fs.Changed("subscribe")
	if publish == subscribe {
		return usagef("give exactly one of --publish PREFIX or --subscribe PREFIX")
	}
	prefix, name := pub, "publish"
	if subscribe {
		prefix, name = sub, "subscribe"
	}
	if err := units.CheckPathPrefix(prefix); err != nil {
		return usagef("flag --%s: %v", name, err)
	}
	_, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	tok, err := relay.NewToken([]byte(keys[0].Secret), pub, sub, publish, subscribe, ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(ios.Out, tok)
	return nil
}

// authCommand is fleet auth rotate | show | export.
func authCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("auth", "the fleet's relay auth key: rotate [--overlap 24h] | show (key ids) | export --out FILE (for origins)",
		authRotateCommand(ios), authShowCommand(ios), authExportCommand(ios))
}

// authShowCommand is fleet auth show.
func authShowCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	cmd := &cobra.Command{
		Use:   "show",
		Short: "print the fleet's key ids (a SHA-256 prefix), never keys",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuthShow(cmd.Context(), &s, ios.Out)
		},
	}
	s.add(cmd.Flags(), false)
	return cmd
}

// runAuthShow prints the fleet's key ids (a SHA-256 prefix), never keys.
func runAuthShow(ctx context.Context, s *stackFlags, stdout io.Writer) error {
	st, err := s.load(io.Discard)
	if err != nil {
		return err
	}
	_, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	writeKeys(stdout, keys)
	return nil
}

func writeKeys(w io.Writer, keys []provision.AuthKey) {
	for i, k := range keys {
		role := "verifies"
		if i == 0 {
			role = "signs and verifies"
		}
		until := "until rotated"
		if !k.Until.IsZero() {
			until = "until " + k.Until.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "key %s  %s, %s\n", k.ID(), role, until)
	}
}

// authExportCommand is fleet auth export.
func authExportCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var out string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "write the fleet's key file for origin relays run outside the fleet (relay serve --auth-key FILE)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuthExport(cmd.Context(), &s, out, ios.Out)
		},
	}
	s.add(cmd.Flags(), false)
	cmd.Flags().StringVar(&out, "out", "", "file to write the key file to, mode 0600 (required)")
	return cmd
}

// runAuthExport writes the fleet's key file for the origin relays that
// ops run outside the fleet (relay serve --auth-key FILE): to the file
// --out names, mode 0600, never to a terminal or stdout.
func runAuthExport(ctx context.Context, s *stackFlags, out string, stdout io.Writer) error {
	st, err := s.load(io.Discard)
	if err != nil {
		return err
	}
	if out == "" {
		return usagef("flag --out: required; the key file is written to a file (mode 0600), never to a terminal")
	}
	if fi, err := os.Stat(out); err == nil && !fi.Mode().IsRegular() {
		return usagef("flag --out: %s is not a regular file", out)
	}
	if fi, err := os.Stat(filepath.Dir(out)); err != nil || !fi.IsDir() {
		return usagef("flag --out: no directory %s", filepath.Dir(out))
	}
	keyFile, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(out, []byte(keyFile), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (mode 0600): %s; run the origin with relay serve --auth-key %s, and export again after each rotation\n", out, text.Plural(len(keys), "key", "keys"), out)
	writeKeys(stdout, keys)
	return nil
}

// authRotateCommand is fleet auth rotate.
func authRotateCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var overlap time.Duration
	var parallel int
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "make a new signing key, keep the old one verifying for --overlap, and converge the fleet's boxes onto both",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuthRotate(cmd.Context(), &s, overlap, parallel, ios.Out, ios.ErrOut)
		},
	}
	fs := cmd.Flags()
	s.add(fs, true)
	fs.DurationVar(&overlap, "overlap", 24*time.Hour, "how long the old key keeps verifying (tokens it signed keep working)")
	cli.Ranged(fs, "overlap", cli.Durations(0, maxTokenTTL))
	fs.IntVar(&parallel, "parallel", 16, "hosts converged at once")
	cli.Ranged(fs, "parallel", parallelRange)
	return cmd
}

// runAuthRotate makes a new signing key, keeps the old one verifying for
// overlap, stores both in the stack and converges the fleet's boxes so
// every relay takes them.
func runAuthRotate(ctx context.Context, s *stackFlags, overlap time.Duration, parallel int, stdout, errOut io.Writer) error {
	st, err := s.load(stdout)
	if err != nil {
		return err
	}
	text, keys, until, err := program.RotateFleetAuthKeys(ctx, openKeyStore(st), clock(), overlap)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "new signing key %s kept encrypted in stack %s\n", keys[0].ID(), st.Name)
	if len(keys) > 1 {
		fmt.Fprintf(stdout, "old keys verify until %s (tokens they signed stop working then); fleet token now signs with %s\n", until.Format(time.RFC3339), keys[0].ID())
	} else {
		fmt.Fprintf(stdout, "no earlier key to keep\n")
	}
	writeKeys(stdout, keys)
	st.Program.AuthKeys = text
	if err := convergeRotation(ctx, s, st, text, parallel, stdout, errOut); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "every relay of the fleet verifies with the new keys; event boxes take them at the next fleet events reconcile; origins run outside the fleet need fleet auth export again\n")
	return nil
}

// convergeRotation brings the steady boxes the stack lists onto the
// rotated keys through the converge path, on every backend.
func convergeRotation(ctx context.Context, s *stackFlags, st *program.Stack, keys string, parallel int, stdout, errOut io.Writer) error {
	_, binary, err := relayBinary(*s.relay)
	if err != nil {
		return err
	}
	targets, cleanup, err := steadyTargets(ctx, st, *s.sshKey, *s.labDir, errOut)
	if err != nil {
		return err
	}
	defer cleanup()
	for i := range targets {
		targets[i].AuthKeys = []byte(keys)
		targets[i].PublicListen = st.Fleet.Access.PublicListen
	}
	return convergeTargets(ctx, stdout, targets, binary, false, false, parallel)
}

// keyFlags say where the fleet's stack is, for commands that otherwise
// work over SSH alone (fleet converge): it holds the relay auth key.
type keyFlags struct {
	stack, stateDir, backend, pulumi string
}

func (k *keyFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&k.stack, "stack", "", "the fleet's steady stack: it lists the boxes and keeps the relay auth key (default: the fleet's name)")
	fs.StringVar(&k.stateDir, "state-dir", "", "state directory (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&k.backend, "backend", "", "Pulumi backend URL (default $"+program.BackendEnv+", else file:// under the state dir)")
	fs.StringVar(&k.pulumi, "pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
}

// stackFor is the fleet's stack as the flags name it.
func (k *keyFlags) stackFor(f *inventories.Fleet) (*program.Stack, error) {
	if err := program.CheckStackName(k.stack); err != nil {
		return nil, usagef("flag --stack: %v", err)
	}
	if err := program.CheckBackendURL(k.backend); err != nil {
		return nil, usagef("flag --backend: %v", err)
	}
	st := &program.Stack{Fleet: f, Name: k.stack, BackendURL: k.backend, Pulumi: k.pulumi}
	if k.stateDir != "" {
		abs, err := filepath.Abs(k.stateDir)
		if err != nil {
			return nil, usagef("flag --state-dir: %v", err)
		}
		st.StateDir = abs
	}
	return st, nil
}
