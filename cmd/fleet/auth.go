package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
)

// openKeyStore is the store of the fleet's relay auth key file; tests
// replace it.
var openKeyStore = func(st *program.Stack) program.KeyStore { return st }

// clock is the time the auth commands work with; tests replace it.
var clock = time.Now

// useRelease points a stack's program at the fleet's release (nil:
// program.Stack.UseRelease); tests replace it.
var useRelease func(ctx context.Context, st *program.Stack, relayFlag string, first bool, notes io.Writer) error

// fleetAuthKeys is program.FleetAuthKeys at the auth commands' clock.
func fleetAuthKeys(ctx context.Context, ks program.KeyStore, create bool) (string, []provision.AuthKey, error) {
	return program.FleetAuthKeys(ctx, ks, clock(), create)
}

// tokenCommand is fleet token (program.MintToken).
func tokenCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	o := program.TokenOptions{Sign: func(key []byte, publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error) {
		tok, err := relay.NewToken(key, publish, subscribe, hasPublish, hasSubscribe, ttl)
		if c, cerr := relay.TokenClaims(tok); err == nil && cerr == nil {
			fmt.Fprintf(ios.ErrOut, "token id %s, valid until %s (fleet token revoke --id %s)\n", c.ID, time.Unix(c.Expires, 0).UTC().Format(time.RFC3339), c.ID)
		}
		return tok, err
	}}
	cmd := &cobra.Command{
		Use:   "token",
		Short: "mint a relay token signed with the fleet's Ed25519 key (kept in its state only): --publish PREFIX | --subscribe PREFIX [--ttl D]",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Env, o.HasPublish, o.HasSubscribe = s.env(ios), cmd.Flags().Changed("publish"), cmd.Flags().Changed("subscribe")
			return program.MintToken(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	s.add(fs, false)
	fs.StringVar(&o.Publish, "publish", "", "broadcast path prefix the token may publish under")
	fs.StringVar(&o.Subscribe, "subscribe", "", "broadcast path prefix the token may subscribe under")
	fs.DurationVar(&o.TTL, "ttl", program.DefaultTokenTTL, "how long the token is valid (at most 24h: the fleet's relays refuse longer-lived tokens)")
	cli.Ranged(fs, "ttl", cli.Durations(time.Second, program.MaxTokenTTL))
	cmd.AddCommand(tokenRevokeCommand(ios))
	return cmd
}

// tokenRevokeCommand is fleet token revoke (program.RevokeToken).
func tokenRevokeCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var lf lockFlags
	var until string
	o := program.RevokeOptions{Targets: allTargets}
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "close and refuse a token's sessions on every relay of the fleet within seconds: --id JTI | --prefix PREFIX [--until T]",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Env = s.env(ios)
			if until != "" {
				t, err := time.Parse(time.RFC3339, until)
				if err != nil {
					return usagef("flag --until %q: want an RFC 3339 time such as 2026-12-07T12:00:00Z", until)
				}
				o.Until = t
			}
			o.Lock = lf.locker(ios, cmd)
			return lf.result(program.RevokeToken(cmd.Context(), o))
		},
	}
	fs := cmd.Flags()
	s.add(fs, false)
	lf.add(fs)
	fs.StringVar(&o.ID, "id", "", "the token's id (jti), as fleet token prints it")
	fs.StringVar(&o.Prefix, "prefix", "", "revoke every token issued until now that grants a broadcast path at or below this prefix (tokens minted afterwards work)")
	fs.StringVar(&until, "until", "", "RFC 3339 time the entry is kept until: the latest expiry of the tokens it names (default: now + 24h, the longest a fleet token lives)")
	fs.IntVar(&o.Parallel, "parallel", 16, "boxes written at once")
	cli.Ranged(fs, "parallel", parallelRange)
	return cmd
}

// allTargets are the boxes of the fleet's steady stack and of its event
// stacks.
func allTargets(ctx context.Context, st *program.Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error) {
	return (&fleethosts.Fleet{Stack: st, Access: fleethosts.Access{LabDir: labDir, SSHKey: sshKey}, Warnings: errOut}).AllTargets(ctx)
}

// authCommand is fleet auth rotate | show | export.
func authCommand(ios *cli.IOStreams) *cobra.Command {
	var show, export stackFlags
	var out string
	showCmd := &cobra.Command{Use: "show", Short: "print the fleet's key ids (a SHA-256 prefix of each public key), never keys", Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return program.ShowAuthKeys(cmd.Context(), show.env(ios)) }}
	show.add(showCmd.Flags(), false)
	exportCmd := &cobra.Command{Use: "export", Short: "write the fleet's public keys, which verify and cannot sign, for origin relays run outside the fleet (relay serve --auth-key FILE)", Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return program.ExportAuthKeys(cmd.Context(), export.env(ios), out)
		}}
	export.add(exportCmd.Flags(), false)
	exportCmd.Flags().StringVar(&out, "out", "", "file to write the public key file to, mode 0600 (required)")
	return cli.Group("auth", "the fleet's relay token keys (Ed25519): rotate [--overlap 24h] | show (key ids) | export --out FILE (public keys, for origins)",
		authRotateCommand(ios), showCmd, exportCmd)
}

// authRotateCommand is fleet auth rotate.
func authRotateCommand(ios *cli.IOStreams) *cobra.Command {
	var s stackFlags
	var lf lockFlags
	var parallel int
	o := program.RotateOptions{Targets: steadyTargets, Converge: func(ctx context.Context, targets []provision.Target, binary []byte) error {
		return convergeTargets(ctx, ios.Out, targets, binary, false, false, parallel)
	}}
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "make a new signing key and link key, keep the old ones verifying for --overlap, and converge the fleet's boxes onto their public halves",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Env = s.env(ios)
			o.Lock = lf.locker(ios, cmd)
			return lf.result(program.RotateAuth(cmd.Context(), o))
		},
	}
	fs := cmd.Flags()
	s.add(fs, true)
	lf.add(fs)
	fs.DurationVar(&o.Overlap, "overlap", 24*time.Hour, "how long the old keys keep verifying (tokens they signed keep working; fleet tokens live 24h at most)")
	cli.Ranged(fs, "overlap", cli.Durations(0, program.MaxOverlap))
	fs.IntVar(&parallel, "parallel", 16, "hosts converged at once")
	cli.Ranged(fs, "parallel", parallelRange)
	return cmd
}

// keyFlags say where the fleet's stack is, for commands that otherwise
// work over SSH alone (fleet converge): it holds the relay auth key.
type keyFlags struct {
	stack, stateDir, backend, pulumi string
}

func (k *keyFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&k.stack, "stack", "", "the fleet's steady stack: it lists the boxes and keeps the relay auth key (default: the fleet's name)")
	fs.StringVar(&k.stateDir, "state-dir", "", "state directory (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&k.backend, "backend", "", "Pulumi backend URL (default: the fleet file's state.backend, else $"+program.BackendEnv+", else file:// under the state dir; one other than the fleet file's is refused)")
	fs.StringVar(&k.pulumi, "pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
}

// stackFor is the fleet's stack as the flags name it (program.Settings.StackFor).
func (k *keyFlags) stackFor(f *inventories.Fleet) (*program.Stack, error) {
	return program.Settings{Name: k.stack, StateDir: k.stateDir, BackendURL: k.backend, Pulumi: k.pulumi}.StackFor(f)
}
