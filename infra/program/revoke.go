package program

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/units"
)

// RelayRevocationsKey is the stack configuration key (a secret, as the
// auth keys) that keeps the fleet's revocation list, the text every box
// gets at units.RevocationFile.
const RelayRevocationsKey = "relayRevocations"

// RevokeOptions are fleet token revoke's options: exactly one of ID
// (--id, a token's jti, which fleet token prints) and Prefix (--prefix).
type RevokeOptions struct {
	Env
	ID, Prefix string
	// Until is when the entry may go (--until): the latest expiry of the
	// tokens it names; zero means MaxTokenTTL from now, the longest any
	// fleet token lives.
	Until time.Time
	// Parallel is how many boxes are written at once.
	Parallel int
	// Targets are every box of the fleet (steady and event stacks),
	// reached with sshKey and labDir; the func returned closes what
	// reaching them holds.
	Targets func(ctx context.Context, st *Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error)
}

// RevokeToken is fleet token revoke: it adds the entry to the fleet's
// revocation list (kept in the stack, RelayRevocationsKey; entries past
// their until are dropped) and writes the list to every box over SSH,
// where each relay reads it within a second, closes the sessions of the
// tokens it names and refuses new ones. A prefix entry names the tokens
// issued up to now: tokens minted afterwards work. The list is changed
// under the fleet's lease (o.Lock).
func RevokeToken(ctx context.Context, o RevokeOptions) error {
	switch {
	case (o.ID == "") == (o.Prefix == ""):
		return cli.Usagef("give exactly one of --id JTI (the token id fleet token prints) or --prefix PREFIX")
	case o.ID != "" && (len(o.ID) > 128 || strings.ContainsAny(o.ID, " \t\r\n=#")):
		return cli.Usagef("flag --id %q: want a token id as fleet token prints it (no spaces, '=' or '#')", o.ID)
	}
	if o.Prefix != "" {
		if err := units.CheckPathPrefix(o.Prefix); err != nil {
			return cli.Usagef("flag --prefix: %v", err)
		}
	}
	now := o.now().UTC()
	until := o.Until
	if until.IsZero() {
		until = now.Add(MaxTokenTTL)
	}
	if !until.After(now) {
		return cli.Usagef("flag --until %s: already past; the tokens it would name no longer verify", until.Format(time.RFC3339))
	}
	st, err := o.Load(io.Discard)
	if err != nil {
		return err
	}
	// The list is read, changed and written under the fleet's lease: two
	// revokes at once would each drop the other's entry.
	ctx, unlock, err := o.lock(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	ks := o.keyStore(st)
	secrets, err := ks.ReadSecrets(ctx)
	if err != nil {
		return err
	}
	r := provision.Revocation{ID: o.ID, Prefix: o.Prefix, IssuedBefore: now.Truncate(time.Second), Until: until.UTC().Add(time.Second - 1).Truncate(time.Second)}
	rs, err := provision.AddRevocation(secrets[RelayRevocationsKey], r, now)
	if err != nil {
		return fmt.Errorf("stack secret %s: %w", RelayRevocationsKey, err)
	}
	list := provision.FormatRevocations(rs)
	if err := st.fence(ctx); err != nil {
		return err
	}
	if err := ks.SetSecret(ctx, RelayRevocationsKey, list); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "revoked %s until %s (kept in stack %s, %s in the list)\n", r.String()[:strings.Index(r.String(), " ")], r.Until.Format(time.RFC3339), st.Name, text.Plural(len(rs), "entry", "entries"))
	targets, cleanup, err := o.Targets(ctx, st, o.SSHKey, o.LabDir, o.IO.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	err = provision.PushRevocations(ctx, targets, []byte(list), "", o.Parallel, func(host string, err error) {
		if err != nil {
			fmt.Fprintf(o.IO.Out, "%s: not written: %v\n", host, err)
			return
		}
		fmt.Fprintf(o.IO.Out, "%s: revocation list written\n", host)
	})
	if err != nil {
		return fmt.Errorf("revocation list not on every box (run fleet token revoke again): %w", err)
	}
	fmt.Fprintf(o.IO.Out, "%s have the list: their relays close the named sessions within about a second and refuse new ones\n", text.Plural(len(targets), "box", "boxes"))
	return nil
}
