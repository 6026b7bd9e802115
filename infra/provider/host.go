package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/infer"

	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/units"
)

// Host is the Host resource's controller.
type Host struct{}

// HostArgs are a Host's inputs, and the program's: the box to converge
// (from a Box's outputs) and the relay layout it gets. A host is
// converged again on any change, never replaced (diff:"inPlace",
// schema.go).
type HostArgs struct {
	Box     string `pulumi:"box" diff:"inPlace"`
	Backend string `pulumi:"backend" diff:"inPlace"`
	// SSHAddress is host:port; HostKey the box's public host key.
	SSHAddress string `pulumi:"sshAddress" diff:"inPlace"`
	HostKey    string `pulumi:"hostKey" diff:"inPlace"`
	User       string `pulumi:"user,optional" diff:"inPlace"`
	Cores      int    `pulumi:"cores" diff:"inPlace"`
	RAM        int    `pulumi:"ram" diff:"inPlace"`
	// Processes is the relay process count; 0 means one per core.
	Processes int `pulumi:"processes,optional" diff:"inPlace"`
	BasePort  int `pulumi:"basePort,optional" diff:"inPlace"`
	// Release is the relay build's SHA-256; RelayBinary the file holding
	// it on the machine that runs the provider.
	Release     string `pulumi:"release" diff:"inPlace"`
	RelayBinary string `pulumi:"relayBinary" diff:"inPlace"`
	// Upstream is the fleet's origin: relay URLs every process pulls
	// broadcasts from that are not published to it.
	Upstream []string `pulumi:"upstream,optional" diff:"inPlace"`
	// AuthKeys is the fleet's relay auth key file, a secret: installed on
	// the box for root alone and handed to the relays as a systemd
	// credential. Pulumi keeps it encrypted in the state.
	AuthKeys string `pulumi:"authKeys" provider:"secret" diff:"inPlace"`
	// AcceptLinkTokens marks a box other relays pull from (an origin):
	// its relays get AuthKeys whole and take the edges' link tokens;
	// every other box gets it without the link key's public half
	// (provision.RelayKeyFile) and refuses them.
	AcceptLinkTokens bool `pulumi:"acceptLinkTokens,optional" diff:"inPlace"`
	// PublicListen are broadcast path prefixes listeners may subscribe
	// under without a token.
	PublicListen []string `pulumi:"publicListen,optional" diff:"inPlace"`
	// MaxSessionsPerAddress caps each relay's sessions from one source
	// address; 0: no cap.
	MaxSessionsPerAddress int `pulumi:"maxSessionsPerAddress,optional" diff:"inPlace"`
	// UncappedAddresses are the fleet's load generators, whose sessions
	// no per-address cap counts: CIDR prefixes, comma-separated.
	UncappedAddresses string `pulumi:"uncappedAddresses,optional" diff:"inPlace"`
	// TLSKey is the box's relay TLS key (PEM PKCS #8 ECDSA P-256), a
	// secret made by the fleet (provision.BoxTLSKey): installed on the box
	// for root alone and handed to the relays as a systemd credential
	// for relay serve --tls-key. Its SPKI is the SPKI output, the pin the
	// router checks. Empty leaves the relays making their own keys.
	TLSKey string `pulumi:"tlsKey,optional" provider:"secret" diff:"inPlace"`
}

// HostState is a Host's outputs.
type HostState struct {
	HostArgs
	// DesiredHash is the hash of the desired state last converged.
	DesiredHash string `pulumi:"desiredHash"`
	// Ports are the relay processes' ports.
	Ports []int `pulumi:"ports"`
	// Drift lists what differs on the box from the converged state, as
	// found by the last refresh; empty when converged.
	Drift []string `pulumi:"drift"`
	// Refused are sysctl keys the box's kernel would not take.
	Refused []string `pulumi:"sysctlRefused"`
	// SPKI is the SHA-256 of the TLSKey's public key (hex), the pin of
	// every relay process of the box; empty without a TLSKey.
	SPKI string `pulumi:"spki"`
}

// Annotate describes the resource.
func (h *Host) Annotate(a infer.Annotator) {
	a.SetToken("index", "Host")
	a.Describe(&h, "A relay host: a box converged over SSH (sysctl, relay units per core, the relay release).")
}

// WireDependencies keeps the auth key file secret in every output and in
// the state, whatever the engine hands in.
func (*Host) WireDependencies(f infer.FieldSelector, _ *HostArgs, state *HostState) {
	f.OutputField(&state.AuthKeys).AlwaysSecret()
	f.OutputField(&state.TLSKey).AlwaysSecret()
}

// Annotate describes the inputs.
func (a *HostArgs) Annotate(an infer.Annotator) {
	an.Describe(&a.AuthKeys, "The fleet's relay key file (secret): the public keys that verify tokens and the link key, never a key that signs tokens to publish.")
	an.Describe(&a.AcceptLinkTokens, "Whether other relays pull from this box (an origin): its relays take the edges' link tokens; other boxes' key files lack the link key's public half.")
	an.Describe(&a.PublicListen, "Broadcast path prefixes listeners may subscribe under without a token.")
	an.Describe(&a.MaxSessionsPerAddress, "The most sessions each relay process admits from one source address (0: no cap).")
	an.Describe(&a.UncappedAddresses, "The fleet's load generators (CIDR prefixes, comma-separated), whose sessions no per-address cap counts.")
	an.Describe(&a.TLSKey, "The box's relay TLS key (secret, PEM PKCS #8 ECDSA P-256): every relay process serves certificates for it.")
}

// Annotate describes the outputs.
func (s *HostState) Annotate(a infer.Annotator) {
	a.Describe(&s.Drift, "What differs on the box from the converged state, found by the last refresh.")
	a.Describe(&s.DesiredHash, "The hash of the desired state last converged.")
	a.Describe(&s.SPKI, "The SHA-256 of the relay TLS key's public key: the pin the router checks when it polls the box's relays.")
}

// DefaultBasePort is the first relay port when the inputs give none.
const DefaultBasePort = 4443

func (a HostArgs) layout(cpus []int) units.Layout {
	bp := a.BasePort
	if bp == 0 {
		bp = DefaultBasePort
	}
	return units.Layout{
		Cores:     a.Cores,
		RAM:       int64(a.RAM),
		Processes: a.Processes,
		BasePort:  bp,
		Binary:    provision.DefaultRoot + "/current/relay",
		CPUs:      cpus,
		Upstream:  a.Upstream,

		PublicListen:          a.PublicListen,
		MaxSessionsPerAddress: a.MaxSessionsPerAddress,
		UncappedAddresses:     a.UncappedAddresses,
	}
}

// DesiredHash hashes what the host should be: the rendered files, units
// and sysctl values for its layout, the release, and the box it is on.
// It is pure; Diff compares it with the hash last converged.
func DesiredHash(a HostArgs) (string, error) {
	plan, err := provision.DesiredRelay(a.layout(nil), a.Release, a.relayKeys(), a.tlsKey())
	if err != nil {
		return "", fmt.Errorf("desired state: %w", err)
	}
	doc := struct {
		Box, SSHAddress, HostKey, User string
		State                          provision.HostState
	}{a.Box, a.SSHAddress, strings.TrimSpace(a.HostKey), userOr(a.User), plan.State}
	data, err := json.Marshal(doc) // maps marshal in key order
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// portsOf reads the ports from relay@PORT.service names.
func portsOf(instances []string) []int {
	var ports []int
	for _, in := range instances {
		s := strings.TrimSuffix(strings.TrimPrefix(in, "relay@"), ".service")
		if n, err := strconv.Atoi(s); err == nil {
			ports = append(ports, n)
		}
	}
	sort.Ints(ports)
	return ports
}

func (a HostArgs) validate() error {
	switch {
	case a.SSHAddress == "":
		return fmt.Errorf("sshAddress: missing")
	case a.Cores <= 0 || a.RAM <= 0:
		return fmt.Errorf("cores and ram: want positive values, got %d and %d", a.Cores, a.RAM)
	case len(a.Release) != 64:
		return fmt.Errorf("release: want the relay build's SHA-256, got %q", a.Release)
	case a.RelayBinary == "":
		return fmt.Errorf("relayBinary: missing")
	case a.AuthKeys == "":
		return fmt.Errorf("authKeys: missing; %v", provision.ErrNoAuthKey)
	}
	if err := provision.CheckBoxKeyFile(a.AuthKeys); err != nil {
		return fmt.Errorf("authKeys: %v", err)
	}
	if _, err := a.spki(); err != nil {
		return err
	}
	_, err := parseKey(a.HostKey)
	return err
}

// relayKeys is the key file the box's relays get: AuthKeys, less the
// link key's public half unless relays pull from the box.
func (a HostArgs) relayKeys() []byte {
	return provision.RelayKeyFile([]byte(a.AuthKeys), a.AcceptLinkTokens)
}

// tlsKey is the TLSKey's bytes, nil without one.
func (a HostArgs) tlsKey() []byte {
	if a.TLSKey == "" {
		return nil
	}
	return []byte(a.TLSKey)
}

// spki is the TLSKey's SPKI sha256, "" without one.
func (a HostArgs) spki() (string, error) {
	if a.TLSKey == "" {
		return "", nil
	}
	spki, err := provision.TLSKeySPKI([]byte(a.TLSKey))
	if err != nil {
		return "", fmt.Errorf("tlsKey: %v", err)
	}
	return spki, nil
}

// converge converges the host to its inputs (check: only probe) and
// returns the state with the drift it found.
func converge(ctx context.Context, a HostArgs, check bool) (HostState, error) {
	if err := a.validate(); err != nil {
		return HostState{}, err
	}
	hash, err := DesiredHash(a)
	if err != nil {
		return HostState{}, err
	}
	var binary []byte
	if !check {
		if binary, err = os.ReadFile(a.RelayBinary); err != nil {
			return HostState{}, fmt.Errorf("relay binary: %w", err)
		}
		if got := provision.Digest(binary); got != a.Release {
			return HostState{}, fmt.Errorf("relay binary %s is %.12s, the inputs want %.12s", a.RelayBinary, got, a.Release)
		}
	}
	spki, err := a.spki()
	if err != nil {
		return HostState{}, err
	}
	st := HostState{HostArgs: a, DesiredHash: hash, Drift: []string{}, Refused: []string{}, SPKI: spki}
	h := provision.Host{Name: a.Box, Address: a.SSHAddress, User: userOr(a.User)}
	err = withRunner(ctx, a.Backend, config(ctx).SSHKeyFile, h, a.HostKey, func(run provision.Runner) error {
		facts, err := provision.ReadFacts(ctx, run)
		if err != nil {
			return err
		}
		plan, err := provision.DesiredRelay(a.layout(facts.CPUs), a.Release, a.relayKeys(), a.tlsKey())
		if err != nil {
			return err
		}
		st.Ports = portsOf(plan.State.Instances)
		rep, err := provision.Converge(ctx, run, plan, provision.Releases{}, binary, check)
		if err != nil {
			return err
		}
		if check {
			for _, c := range rep.Changes {
				st.Drift = append(st.Drift, c.String())
			}
		}
		for k := range rep.Refused {
			st.Refused = append(st.Refused, k)
		}
		sort.Strings(st.Refused)
		return nil
	})
	if err != nil {
		return HostState{}, fmt.Errorf("host %s: %w", a.Box, err)
	}
	return st, nil
}

// Check validates the inputs.
func (*Host) Check(ctx context.Context, req infer.CheckRequest) (infer.CheckResponse[HostArgs], error) {
	args, fails, err := infer.DefaultCheck[HostArgs](ctx, req.NewInputs)
	return infer.CheckResponse[HostArgs]{Inputs: args, Failures: fails}, err
}

// Create converges the box.
func (*Host) Create(ctx context.Context, req infer.CreateRequest[HostArgs]) (infer.CreateResponse[HostState], error) {
	id := req.Inputs.Box
	if req.DryRun {
		spki, _ := req.Inputs.spki() // an unknown key in a preview: none yet
		return infer.CreateResponse[HostState]{ID: id, Output: HostState{HostArgs: req.Inputs, SPKI: spki}}, nil
	}
	st, err := converge(ctx, req.Inputs, false)
	if err != nil {
		return infer.CreateResponse[HostState]{}, err
	}
	return infer.CreateResponse[HostState]{ID: id, Output: st}, nil
}

// Update converges the box again: changed files are written, relay
// processes restart one at a time, each waited for (the rolling restart),
// and drift found by a refresh is repaired.
func (*Host) Update(ctx context.Context, req infer.UpdateRequest[HostArgs, HostState]) (infer.UpdateResponse[HostState], error) {
	if req.DryRun {
		spki, _ := req.Inputs.spki()
		return infer.UpdateResponse[HostState]{Output: HostState{HostArgs: req.Inputs, DesiredHash: req.State.DesiredHash, Ports: req.State.Ports, Drift: req.State.Drift, Refused: req.State.Refused, SPKI: spki}}, nil
	}
	st, err := converge(ctx, req.Inputs, false)
	if err != nil {
		return infer.UpdateResponse[HostState]{}, err
	}
	return infer.UpdateResponse[HostState]{Output: st}, nil
}

// Read probes the box and reports drift without changing anything.
func (*Host) Read(ctx context.Context, req infer.ReadRequest[HostArgs, HostState]) (infer.ReadResponse[HostArgs, HostState], error) {
	a := req.State.HostArgs
	if a.SSHAddress == "" {
		a = req.Inputs
	}
	// A release every process of the box runs (a fleet rollout or
	// rollback moved it) is the host's release now: the state learns it,
	// so an up with the fleet's recorded release plans no update.
	inputs := req.Inputs
	rel, err := settledRelease(ctx, a)
	if err != nil {
		return infer.ReadResponse[HostArgs, HostState]{}, err
	}
	adopted := rel != "" && rel != a.Release
	if adopted {
		a.Release, inputs.Release = rel, rel
	}
	st, err := converge(ctx, a, true)
	if err != nil {
		return infer.ReadResponse[HostArgs, HostState]{}, err
	}
	// Otherwise the hash stays the one converged: drift shows in Drift,
	// and Diff turns drift into an update.
	if !adopted {
		st.DesiredHash = req.State.DesiredHash
	}
	return infer.ReadResponse[HostArgs, HostState]{ID: req.ID, Inputs: inputs, State: st}, nil
}

// settledRelease is the release the box's current points at when every
// relay process runs it, else "" (a rollout under way or cut off: drift,
// which converge repairs).
func settledRelease(ctx context.Context, a HostArgs) (string, error) {
	var rel string
	h := provision.Host{Name: a.Box, Address: a.SSHAddress, User: userOr(a.User)}
	err := withRunner(ctx, a.Backend, config(ctx).SSHKeyFile, h, a.HostKey, func(run provision.Runner) error {
		cur, _, err := provision.Releases{}.Current(ctx, run)
		if err != nil || cur == "" {
			return err
		}
		insts, err := provision.ActiveInstances(ctx, run)
		if err != nil || len(insts) == 0 {
			return err
		}
		runs, err := provision.Releases{}.Running(ctx, run, insts)
		if err != nil {
			return err
		}
		for _, inst := range insts {
			if runs[inst] != cur {
				return nil
			}
		}
		rel = cur
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("host %s: %w", a.Box, err)
	}
	return rel, nil
}

// Delete leaves the box as it is: a lab or cloud box goes with its Box,
// and a static server keeps running its relays until someone stops them.
func (*Host) Delete(context.Context, infer.DeleteRequest[HostState]) (infer.DeleteResponse, error) {
	return infer.DeleteResponse{}, nil
}

// Diff compares the desired state's hash with the one last converged and
// asks for an update when they differ or a refresh found drift.
func (*Host) Diff(_ context.Context, req infer.DiffRequest[HostArgs, HostState]) (infer.DiffResponse, error) {
	return hostDiff(req.State, req.Inputs)
}

func hostDiff(old HostState, in HostArgs) (p.DiffResponse, error) {
	d := p.DiffResponse{DetailedDiff: map[string]p.PropertyDiff{}}
	if in.SSHAddress == "" || in.HostKey == "" || in.Cores <= 0 || in.RAM <= 0 {
		// The box is not known yet (a preview of a new or replaced box):
		// the host will be converged onto it.
		d.HasChanges = true
		d.DetailedDiff["sshAddress"] = p.PropertyDiff{Kind: p.Update, InputDiff: true}
		return d, nil
	}
	want, err := DesiredHash(in)
	if err != nil {
		return d, err
	}
	if want != old.DesiredHash {
		// The inputs that differ, read from HostArgs' tags (diffInputs); the
		// build's path alone changes nothing on the box (below), and a host
		// key differs only if more than its surrounding space does.
		was, now := old.HostArgs, in
		was.RelayBinary, was.HostKey = now.RelayBinary, strings.TrimSpace(was.HostKey)
		now.HostKey = strings.TrimSpace(now.HostKey)
		changed, err := diffInputs(was, now)
		if err != nil {
			return d, err
		}
		d.HasChanges = true
		d.DetailedDiff = changed.DetailedDiff
		d.DetailedDiff["desiredHash"] = p.PropertyDiff{Kind: p.Update}
	}
	if len(old.Drift) > 0 {
		d.HasChanges = true
		d.DetailedDiff["drift"] = p.PropertyDiff{Kind: p.Update}
	}
	// Another path to the same build (each machine caches the fleet's
	// release in its own state dir) changes nothing on the box: no
	// update. The state keeps the old path until a real change; nothing
	// reads it there (a refresh only probes, an update is handed the new
	// inputs).
	return d, nil
}
