package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

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

// runToken mints a token signed with the fleet's key: fleet token
// --inventory FILE (--publish PREFIX | --subscribe PREFIX) [--ttl D].
func runToken(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	s := newStackFlags("token", stdout, false)
	pub := s.fs.String("publish", "", "broadcast path prefix the token may publish under")
	sub := s.fs.String("subscribe", "", "broadcast path prefix the token may subscribe under")
	ttl := s.fs.Duration("ttl", defaultTokenTTL, "how long the token is valid (at most 720h)")
	st, err := s.parse(args, io.Discard)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	s.fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	if set["publish"] == set["subscribe"] {
		return usagef("give exactly one of --publish PREFIX or --subscribe PREFIX")
	}
	prefix, name := *pub, "publish"
	if set["subscribe"] {
		prefix, name = *sub, "subscribe"
	}
	if err := units.CheckPathPrefix(prefix); err != nil {
		return usagef("flag --%s: %v", name, err)
	}
	if *ttl <= 0 || *ttl > maxTokenTTL {
		return usagef("flag --ttl: want a duration from 1s to %s, got %s", maxTokenTTL, *ttl)
	}
	_, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	tok, err := relay.NewToken([]byte(keys[0].Secret), *pub, *sub, set["publish"], set["subscribe"], *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// runAuth is fleet auth rotate | show | export.
func runAuth(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	if len(args) == 0 {
		return usagef("want rotate, show or export, as in: fleet auth show --inventory FILE")
	}
	switch args[0] {
	case "rotate":
		return runAuthRotate(ctx, args[1:], stdout, ios.ErrOut)
	case "show":
		return runAuthShow(ctx, args[1:], stdout)
	case "export":
		return runAuthExport(ctx, args[1:], stdout)
	}
	return usagef("unknown auth command %q (want rotate, show or export)", args[0])
}

// runAuthShow prints the fleet's key ids (a SHA-256 prefix), never keys.
func runAuthShow(ctx context.Context, args []string, stdout io.Writer) error {
	s := newStackFlags("auth show", stdout, false)
	st, err := s.parse(args, io.Discard)
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

// runAuthExport writes the fleet's key file for the origin relays that
// ops run outside the fleet (relay serve --auth-key FILE): to the file
// --out names, mode 0600, never to a terminal or stdout.
func runAuthExport(ctx context.Context, args []string, stdout io.Writer) error {
	s := newStackFlags("auth export", stdout, false)
	out := s.fs.String("out", "", "file to write the key file to, mode 0600 (required)")
	st, err := s.parse(args, io.Discard)
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("flag --out: required; the key file is written to a file (mode 0600), never to a terminal")
	}
	if fi, err := os.Stat(*out); err == nil && !fi.Mode().IsRegular() {
		return usagef("flag --out: %s is not a regular file", *out)
	}
	if fi, err := os.Stat(filepath.Dir(*out)); err != nil || !fi.IsDir() {
		return usagef("flag --out: no directory %s", filepath.Dir(*out))
	}
	text, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(*out, []byte(text), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (mode 0600): %s; run the origin with relay serve --auth-key %s, and export again after each rotation\n", *out, plural(len(keys), "key", "keys"), *out)
	writeKeys(stdout, keys)
	return nil
}

// runAuthRotate makes a new signing key, keeps the old one verifying for
// --overlap, stores both in the stack and converges the fleet's boxes so
// every relay takes them.
func runAuthRotate(ctx context.Context, args []string, stdout, errOut io.Writer) error {
	s := newStackFlags("auth rotate", stdout, true)
	overlap := s.fs.Duration("overlap", 24*time.Hour, "how long the old key keeps verifying (tokens it signed keep working)")
	parallel := s.fs.Int("parallel", 16, "hosts converged at once")
	st, err := s.parse(args, stdout)
	if err != nil {
		return err
	}
	if *overlap < 0 || *overlap > maxTokenTTL {
		return usagef("flag --overlap: want a duration from 0 to %s, got %s", maxTokenTTL, *overlap)
	}
	if *parallel <= 0 {
		return usagef("flag --parallel: must be positive, got %d", *parallel)
	}
	text, keys, until, err := program.RotateFleetAuthKeys(ctx, openKeyStore(st), clock(), *overlap)
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
	if err := convergeRotation(ctx, s, st, text, *parallel, stdout, errOut); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "every relay of the fleet verifies with the new keys; event boxes take them at the next fleet events reconcile; origins run outside the fleet need fleet auth export again\n")
	return nil
}

// convergeRotation brings the steady boxes the stack lists onto the
// rotated keys through the converge path, on every backend.
func convergeRotation(ctx context.Context, s *stackFlags, st *program.Stack, keys string, parallel int, stdout, errOut io.Writer) error {
	binary, err := relayBinary(*s.relay)
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
	if k.stack != "" && !stackNameRE.MatchString(k.stack) {
		return nil, usagef("flag --stack: want letters, digits, '-', '_' or '.', got %q", k.stack)
	}
	if k.backend != "" && !strings.Contains(k.backend, "://") {
		return nil, usagef("flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got %q", k.backend)
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
