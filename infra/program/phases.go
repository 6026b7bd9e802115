package program

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/mapper"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// Replacing a box, one at a time.
//
// A change that replaces boxes (shape, image, location: the provider's
// Diff) makes each new box before the old one goes (create before delete,
// the new one on a name of its own) and the old one drains and sheds
// before its delete (Box.Delete). The router must know the new box by
// then, and a fleet must never lose several boxes at once. So Up replaces
// the boxes one per Pulumi run, each a run targeted at the box and what
// depends on it (its Host):
//
//  1. the new box is made and its Host converged onto it;
//  2. as soon as the engine reports the Host's outputs, the router's
//     relays file gets the new box, and the old box marked draining;
//  3. the engine then deletes the old box (Pulumi runs the deletes of
//     replaced resources after every create and update), which drains
//     and sheds first: its listeners reconnect through the router to the
//     boxes it lists, the new one among them;
//  4. the relays file loses the old box; the next box is replaced.
//
// A full run then does the rest, and writes the relays file from the
// stack's outputs as always.

// ReplacedSuffix marks, in the relays file, the old box of a replacement
// still running beside its replacement of the same name.
const ReplacedSuffix = "~replaced"

// replaceOneByOne replaces the boxes of doomed whose Op is OpReplace, one
// per targeted run, and adds each run's changes to changes.
func (s *Stack) replaceOneByOne(ctx context.Context, st auto.Stack, doomed []Doomed, changes map[string]int) error {
	doomed = slices.Clone(doomed)
	slices.SortStableFunc(doomed, func(a, b Doomed) int { return strings.Compare(a.Name, b.Name) })
	for _, d := range doomed {
		if d.Op != OpReplace {
			continue
		}
		ch := make(chan events.EngineEvent)
		followed := make(chan error, 1)
		go func() { followed <- s.followReplacement(ch, d) }()
		opts := []optup.Option{optup.Target([]string{d.URN}), optup.TargetDependents(), optup.EventStreams(ch),
			optup.ProgressStreams(s.progress()), optup.ErrorProgressStreams(s.progress())}
		if s.Refresh {
			opts = append(opts, optup.Refresh())
		}
		res, err := st.Up(ctx, opts...)
		ferr := <-followed
		if err != nil {
			return fmt.Errorf("up, replacing box %s: %s", d.Name, lastLines(err.Error()))
		}
		if ferr != nil {
			return ferr
		}
		if res.Summary.ResourceChanges != nil {
			for k, v := range *res.Summary.ResourceChanges {
				if k != string(apitype.OpSame) {
					changes[k] += v
				}
			}
		}
		// The old box is gone: out of the relays file.
		if _, err := updateStack(s.StateDir, s.Name, func(sh *StackHosts) bool {
			sh.Hosts = slices.DeleteFunc(sh.Hosts, func(h HostEntry) bool { return h.Name == d.Name+ReplacedSuffix })
			sh.DrainingHosts = slices.DeleteFunc(sh.DrainingHosts, func(n string) bool { return n == d.Name+ReplacedSuffix })
			return len(sh.Hosts) > 0
		}); err != nil {
			return err
		}
	}
	return nil
}

// followReplacement reads a replacement run's engine events until the
// stream ends. When the replaced box's Host reports its outputs (it is
// converged onto the new box), the relays file gets the new box, and the
// old one, renamed NAME~replaced, draining.
func (s *Stack) followReplacement(ch <-chan events.EngineEvent, d Doomed) error {
	hostURN := strings.Replace(d.URN, "::"+provider.BoxType+"::", "::"+provider.HostType+"::", 1)
	var boxOut map[string]any
	var err error
	for e := range ch {
		if err != nil || e.ResOutputsEvent == nil {
			continue
		}
		// Only the steps that make the new box and converge it: a
		// refresh reports the old box's outputs.
		m := e.ResOutputsEvent.Metadata
		if m.New == nil {
			continue
		}
		switch {
		case m.URN == d.URN && (m.Op == apitype.OpCreateReplacement || m.Op == apitype.OpReplace):
			boxOut = m.New.Outputs
		case m.URN == hostURN && boxOut != nil && slices.Contains([]apitype.OpType{apitype.OpCreate, apitype.OpUpdate, apitype.OpCreateReplacement, apitype.OpReplace}, m.Op):
			err = s.announceReplacement(d, boxOut, m.New.Outputs)
		}
	}
	return err
}

// announceReplacement writes the new box into the relays file beside the
// old one, which it marks draining.
func (s *Stack) announceReplacement(d Doomed, box, host map[string]any) error {
	var b provider.BoxState
	var h provider.HostState
	decodeOutputs(box, &b)
	decodeOutputs(host, &h)
	addr, _, err := net.SplitHostPort(b.SSHAddress)
	if err != nil {
		return fmt.Errorf("replacement of box %s: ssh address %q: %v", d.Name, b.SSHAddress, err)
	}
	if len(b.Addresses) > 0 && b.Addresses[0] != "" {
		addr = b.Addresses[0]
	}
	nu := HostEntry{Name: b.Name, Backend: b.Backend, Address: addr, SSHAddress: b.SSHAddress,
		HostKey: b.HostPublicKey, User: h.User, Ports: h.Ports, SPKI: h.SPKI}
	if nu.Name == "" || len(nu.Ports) == 0 {
		return fmt.Errorf("replacement of box %s: the engine reported no name or ports for it", d.Name)
	}
	_, err = updateStack(s.StateDir, s.Name, func(sh *StackHosts) bool {
		// Announced already (the Host's outputs reported again): the
		// new entry is brought up to date.
		if slices.ContainsFunc(sh.Hosts, func(h HostEntry) bool { return h.Name == d.Name+ReplacedSuffix }) {
			if i := slices.IndexFunc(sh.Hosts, func(h HostEntry) bool { return h.Name == d.Name }); i >= 0 {
				nu.Group = sh.Hosts[i].Group
				sh.Hosts[i] = nu
				return true
			}
		}
		i := slices.IndexFunc(sh.Hosts, func(h HostEntry) bool { return h.Name == d.Name })
		if i >= 0 {
			old := sh.Hosts[i]
			nu.Group = old.Group
			if nu.User == "" {
				nu.User = old.User
			}
			old.Name += ReplacedSuffix
			sh.Hosts[i] = old
			sh.DrainingHosts = append(sh.DrainingHosts, old.Name)
		}
		sh.Hosts = append(sh.Hosts, nu)
		return true
	})
	if err == nil {
		fmt.Fprintf(s.progress(), "relays file: %s's replacement (%s) in, the old box draining\n", d.Name, nu.Address)
	}
	return err
}

// decodeOutputs fills the provider's state struct st from a resource's
// outputs as the engine reports them, by st's pulumi tags. What is
// missing, or of another kind (a secret shows as "[secret]"), stays zero.
func decodeOutputs(outputs map[string]any, st any) {
	_ = mapper.New(&mapper.Opts{IgnoreMissing: true, IgnoreUnrecognized: true}).Decode(outputs, st)
}
