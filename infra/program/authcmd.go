package program

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/units"
)

// Token lifetimes fleet token accepts: at most what the fleet's relays
// accept (relay serve --max-token-lifetime, 24h by default, as the
// fleet's units leave it). MaxOverlap bounds fleet auth rotate's overlap.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 24 * time.Hour
	MaxOverlap      = 30 * 24 * time.Hour
)

// TokenOptions are fleet token's options: exactly one of Publish and
// Subscribe is given (--publish PREFIX, --subscribe PREFIX).
type TokenOptions struct {
	Env
	Publish, Subscribe       string
	HasPublish, HasSubscribe bool
	TTL                      time.Duration
	// Sign makes the token with the fleet's signing key, an Ed25519 seed
	// (relay.NewToken).
	Sign func(key []byte, publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error)
}

// MintToken is fleet token: a relay token signed with the fleet's signing
// key, for the prefix and TTL asked, printed on a line of its own. It
// needs the key fleet up made (provision.ErrNoAuthKey: run fleet up).
func MintToken(ctx context.Context, o TokenOptions) error {
	st, err := o.Load(io.Discard)
	if err != nil {
		return err
	}
	if o.HasPublish == o.HasSubscribe {
		return cli.Usagef("give exactly one of --publish PREFIX or --subscribe PREFIX")
	}
	prefix, name := o.Publish, "publish"
	if o.HasSubscribe {
		prefix, name = o.Subscribe, "subscribe"
	}
	if err := units.CheckPathPrefix(prefix); err != nil {
		return cli.Usagef("flag --%s: %v", name, err)
	}
	_, keys, err := o.authKeys(ctx, st, false)
	if err != nil {
		return err
	}
	signer, err := provision.SigningKey(keys)
	if err != nil {
		return err
	}
	tok, err := o.Sign(signer.Seed, o.Publish, o.Subscribe, o.HasPublish, o.HasSubscribe, o.TTL)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.IO.Out, tok)
	return nil
}

// ShowAuthKeys is fleet auth show: the fleet's key ids (a SHA-256
// prefix), never keys (provision.WriteKeys).
func ShowAuthKeys(ctx context.Context, e Env) error {
	st, err := e.Load(io.Discard)
	if err != nil {
		return err
	}
	_, keys, err := e.authKeys(ctx, st, false)
	if err != nil {
		return err
	}
	provision.WriteKeys(e.IO.Out, keys)
	return nil
}

// ExportAuthKeys is fleet auth export: it writes the fleet's public keys
// (provision.PublicKeyFile) for the origin relays ops run outside the
// fleet (relay serve --auth-key FILE) to the file out (--out), mode 0600,
// never to a terminal or stdout, and shows the key ids. The file
// verifies the fleet's tokens and its edges' link tokens and signs
// nothing: a leaked export mints no token.
func ExportAuthKeys(ctx context.Context, e Env, out string) error {
	st, err := e.Load(io.Discard)
	if err != nil {
		return err
	}
	if out == "" {
		return cli.Usagef("flag --out: required; the key file is written to a file (mode 0600), never to a terminal")
	}
	if fi, err := os.Stat(out); err == nil && !fi.Mode().IsRegular() {
		return cli.Usagef("flag --out: %s is not a regular file", out)
	}
	if fi, err := os.Stat(filepath.Dir(out)); err != nil || !fi.IsDir() {
		return cli.Usagef("flag --out: no directory %s", filepath.Dir(out))
	}
	_, keys, err := e.authKeys(ctx, st, false)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(out, []byte(provision.PublicKeyFile(keys)), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(e.IO.Out, "wrote %s (mode 0600): %s, public halves only (they verify, they cannot sign); run the origin with relay serve --auth-key %s, and export again after each rotation\n", out, text.Plural(len(keys), "key", "keys"), out)
	provision.WriteKeys(e.IO.Out, keys)
	return nil
}

// RotateOptions are fleet auth rotate's options.
type RotateOptions struct {
	Env
	// Overlap is how long the old key keeps verifying (--overlap).
	Overlap time.Duration
	// Targets are the fleet's steady boxes as the stack st lists them, on
	// every backend, reached with sshKey and labDir (--ssh-key,
	// --lab-dir; warnings go to errOut); the func returned closes what
	// reaching them holds.
	Targets func(ctx context.Context, st *Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error)
	// Converge brings targets to the relay build binary through the
	// converge path, reporting per host.
	Converge func(ctx context.Context, targets []provision.Target, binary []byte) error
}

// RotateAuth is fleet auth rotate: it makes a new signing key and link
// key, keeps the old ones verifying for Overlap, stores them in the stack
// (RotateFleetAuthKeys) and converges the fleet's steady boxes onto their
// public halves (and the new link key) so that every relay takes them.
// A fleet whose state holds an earlier relayfleet's HS256 key moves to
// Ed25519 keys here, when its relay build reads them
// (CheckKeysForRelease); tokens the HS256 key signed stop working as
// each relay restarts with the new key file.
func RotateAuth(ctx context.Context, o RotateOptions) error {
	stdout := o.IO.Out
	st, err := o.Load(stdout)
	if err != nil {
		return err
	}
	ctx, unlock, err := o.lock(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	// The fleet's release, before anything changes: the converge below
	// must not move any box to the build beside this command.
	if err := o.useRelease(ctx, st, true); err != nil {
		return err
	}
	binary, err := os.ReadFile(st.Program.RelayBinary)
	if err != nil {
		return err
	}
	if err := CheckKeysForRelease(ctx, o.keyStore(st), st.Program.RelayBinary); err != nil {
		return err
	}
	if err := st.fence(ctx); err != nil {
		return err
	}
	keyFile, keys, until, legacy, err := RotateFleetAuthKeys(ctx, o.keyStore(st), o.now(), o.Overlap)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "new signing key %s kept encrypted in stack %s; relays get its public half only\n", keys[0].ID(), st.Name)
	switch {
	case legacy:
		fmt.Fprintf(stdout, "the fleet's HS256 key is dropped: the relays' new key file verifies Ed25519 tokens only, so tokens it signed stop working as each relay takes it; mint new ones with fleet token\n")
	case len(keys) > 2:
		fmt.Fprintf(stdout, "old keys verify until %s (tokens they signed stop working then); fleet token now signs with %s\n", until.Format(time.RFC3339), keys[0].ID())
	default:
		fmt.Fprintf(stdout, "no earlier key to keep\n")
	}
	provision.WriteKeys(stdout, keys)
	st.Program.AuthKeys = keyFile
	targets, cleanup, err := o.Targets(ctx, st, o.SSHKey, o.LabDir, o.IO.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	for i := range targets {
		targets[i].AuthKeys = []byte(keyFile)
		targets[i].PublicListen = st.Fleet.Access.PublicListen
		targets[i].MaxSessionsPerAddress = st.Fleet.Access.SessionsPerAddress()
		targets[i].UncappedAddresses = st.Fleet.Access.UncappedAddresses()
	}
	seed, err := FleetTLSSeed(ctx, o.keyStore(st), true)
	if err != nil {
		return err
	}
	if err := TargetTLSKeys(targets, seed); err != nil {
		return err
	}
	if err := o.Converge(ctx, targets, binary); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "every relay of the fleet verifies with the new keys; event boxes take them at the next fleet events reconcile; origins run outside the fleet need fleet auth export again\n")
	return nil
}

// SecretNames are the names fleet secret set takes, and the provider
// configuration keys they are kept under.
var SecretNames = map[string]string{
	"hcloud-token":       HcloudTokenKey,
	"digitalocean-token": DigitalOceanTokenKey,
}

// SecretCompletions are the completions of fleet secret set's argument
// after args: the secret names for the first, nothing after.
func SecretCompletions(args []string) []string {
	if len(args) > 0 {
		return nil
	}
	return []string{"hcloud-token", "digitalocean-token"}
}

// CheckSecretArgs checks fleet secret set's arguments: one NAME of
// SecretNames.
func CheckSecretArgs(args []string) error {
	switch {
	case len(args) == 0:
		return cli.Usagef("want NAME, as in: fleet secret set hcloud-token --inventory FILE < token-file (NAME: hcloud-token or digitalocean-token)")
	case SecretNames[args[0]] == "":
		return cli.Usagef("unknown secret %q (want hcloud-token or digitalocean-token)", args[0])
	case len(args) > 1:
		return cli.Usagef("unexpected argument %q", args[1])
	}
	return nil
}

// SetSecret is fleet secret set NAME: the value is read from e.IO.In
// (never a terminal or a command line), one token on a line, and kept
// encrypted in the fleet's stack configuration, where the provider reads
// it; event stacks get it from there. It is written under the fleet's
// lease (e.Lock), as every command that changes the fleet's state.
func SetSecret(ctx context.Context, e Env, name string) error {
	key := SecretNames[name]
	st, err := e.Load(io.Discard)
	if err != nil {
		return err
	}
	if e.IO.InTerminal() {
		return cli.Usagef("the %s is read from stdin: pipe it in (fleet secret set %s --inventory FILE < token-file), so it never shows on a terminal or a command line", name, name)
	}
	line, err := bufio.NewReader(io.LimitReader(cli.ContextReader(ctx, e.IO.In), 4096)).ReadString('\n')
	if err != nil && err != io.EOF {
		return fmt.Errorf("read %s from stdin: %w", name, err)
	}
	value := strings.TrimSpace(line)
	if value == "" {
		return cli.Usagef("stdin: empty %s", name)
	}
	if strings.ContainsAny(value, " \t") {
		return cli.Usagef("stdin: the %s has spaces in it; want the token alone", name)
	}
	ctx, unlock, err := e.lock(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	if err := st.fence(ctx); err != nil {
		return err
	}
	if err := st.SetSecret(ctx, key, value); err != nil {
		return err
	}
	fmt.Fprintf(e.IO.Out, "secret %s kept encrypted in stack %s (relayfleet:%s); fleet up and fleet events use it\n", name, st.Name, key)
	return nil
}
