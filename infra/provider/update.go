package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/provision"
)

// replaceAdminKeys makes keys root's authorized_keys on the box st
// describes, over SSH, and checks that a fresh login still works before it
// lets the old file go (provision.ReplaceAuthorizedKeys). Lab boxes keep
// the lab's admin key first: it is how relayfleet reaches them. Other
// boxes are reached with the operator's key (--ssh-key or the ssh-agent),
// which must be among the new keys: the fresh login fails otherwise, and
// the old keys are put back.
func replaceAdminKeys(ctx context.Context, keyFile string, st BoxState, keys []string) error {
	if len(keys) == 0 {
		return errors.New("authorizedKeys: empty: no admin could log in; list the admin's keys in the inventory (admin.ssh_keys)")
	}
	h := provision.Host{Name: st.Name, Address: st.SSHAddress, User: "root"}
	verify := func(ctx context.Context) error {
		// withRunner dials a new connection: the new file is what sshd
		// reads for it.
		return withRunner(ctx, st.Backend, keyFile, h, st.HostPublicKey, func(run provision.Runner) error {
			_, err := run.Run(ctx, "true", nil)
			return err
		})
	}
	err := withRunner(ctx, st.Backend, keyFile, h, st.HostPublicKey, func(run provision.Runner) error {
		return provision.ReplaceAuthorizedKeys(ctx, run, keys, verify)
	})
	if err != nil {
		return fmt.Errorf("admin keys: %w", err)
	}
	return nil
}

func (be labBackend) update(ctx context.Context, old BoxState, a BoxArgs, ch boxChange) error {
	name := labName(old.BoxArgs, old.BackendID)
	if ch.keys {
		admin, err := be.l.AdminAuthorizedKey()
		if err != nil {
			return err
		}
		if err := replaceAdminKeys(ctx, "", old, append([]string{admin}, a.AuthorizedKeys...)); err != nil {
			return err
		}
		if err := be.l.SetAuthorizedKeys(ctx, name, a.AuthorizedKeys); err != nil {
			return err
		}
	}
	if ch.labels {
		if err := be.l.SetLabels(ctx, name, a.AllLabels()); err != nil {
			return err
		}
	}
	return nil
}

func (c cloudBackend) update(ctx context.Context, old BoxState, a BoxArgs, ch boxChange) error {
	if ch.keys {
		if err := replaceAdminKeys(ctx, c.keyFile, old, a.AuthorizedKeys); err != nil {
			return err
		}
	}
	if ch.labels {
		lb, ok := c.api.(backend.Labeler)
		if !ok {
			return fmt.Errorf("labels: backend %s cannot change a box's labels", a.Backend)
		}
		if err := lb.SetLabels(ctx, old.BackendID, a.AllLabels()); err != nil {
			return fmt.Errorf("labels: %w", err)
		}
	}
	return nil
}

// update records the new inputs only: a static server is the operator's,
// and relayfleet neither labels it nor rewrites its logins.
func (staticBackend) update(context.Context, BoxState, BoxArgs, boxChange) error { return nil }

// Drain bounds of a box about to be deleted: drainRouterWait between
// marking its relays draining and telling their listeners to go (two polls
// of a router at its one-second poll), drainEmptyWait for the listeners
// to leave. Tests shorten them.
var (
	drainRouterWait = 2 * time.Second
	drainEmptyWait  = 30 * time.Second
	drainDialWait   = 10 * time.Second
)

// drainBox moves the listeners off a box before it is deleted (a replaced
// box, once its replacement is made and converged; a box the inventory
// dropped): every relay process is marked draining, so routers send it
// nobody new, then told to send its listeners away with the going-away
// notice (provision.BurstDrain), and drainBox waits, up to drainEmptyWait,
// until they have left. It returns the listeners still there.
func drainBox(ctx context.Context, keyFile string, st BoxState) (left int64, err error) {
	h := provision.Host{Name: st.ServerName, Address: st.SSHAddress, User: "root"}
	// A box that does not answer soon serves nobody: no long retries.
	err = withRunnerRetry(ctx, st.Backend, keyFile, h, st.HostPublicKey, drainDialWait, func(run provision.Runner) error {
		insts, err := provision.ActiveInstances(ctx, run)
		if err != nil || len(insts) == 0 {
			return err
		}
		if err := provision.BurstDrain(ctx, []provision.Box{{Name: h.Name, Run: run}}, drainRouterWait, provision.DefaultShedRate); err != nil {
			return err
		}
		deadline := time.Now().Add(drainEmptyWait)
		for {
			left, err = provision.BoxListeners(ctx, run, insts)
			if err != nil || left == 0 || time.Now().After(deadline) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return left, err
}
