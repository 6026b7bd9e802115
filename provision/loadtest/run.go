package loadtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// Fleet is what a load test needs of the fleet's steady stack, once it is
// open: the relay auth keys its tokens are signed with, and the steady
// boxes (infra/fleethosts.Fleet is one).
type Fleet interface {
	AuthKeys(ctx context.Context, create bool) (string, []provision.AuthKey, error)
	SteadyTargets(ctx context.Context) (targets []provision.Target, close func(), err error)
}

// TokenSigner signs a token with key that lets its bearer publish under
// publish and subscribe under subscribe (relay.NewToken).
type TokenSigner func(key []byte, publish, subscribe string, hasPublish, hasSubscribe bool, ttl time.Duration) (string, error)

// Options are fleet loadtest's: its flags, and how it reaches the fleet.
type Options struct {
	// Inventory is the fleet file; Target the box (or BOX:PORT) measured.
	// Both are required.
	Inventory, Target string
	// Steps are the listener counts (ParseSteps), StepDuration the
	// measurement of each, Ramp the listeners started per second.
	Steps        string
	StepDuration time.Duration
	Ramp         float64
	// RelayBinary is --relay-binary (provision.FindRelay).
	RelayBinary string
	// OutDir gets calibration.yaml, loadtest.json and loadtest.svg
	// ("": the inventory's directory).
	OutDir string
	// JSON prints the steps and the fit as JSON, nothing as they go.
	JSON bool
	Out  io.Writer
	// Open opens the fleet's steady stack, once the flags and the fleet
	// file are checked.
	Open func(*inventories.Fleet) (Fleet, error)
	// Sign signs the publisher's and the listeners' tokens.
	Sign TokenSigner
}

// Run is fleet loadtest: it checks o (usage errors name the flag), finds
// the box among the steady stack's, measures it (Tester) and writes the
// calibration with its curve (Write), keeping what a load test cannot
// measure from the calibration beside the inventory; the result goes to
// o.Out. A run whose fit failed writes no calibration and says why.
func Run(ctx context.Context, o Options) error {
	if o.Inventory == "" {
		return cli.Usagef("flag --inventory: required")
	}
	if o.Target == "" {
		return cli.Usagef("flag --target: required (BOX or BOX:PORT)")
	}
	steps, err := ParseSteps(o.Steps)
	if err != nil {
		return cli.Usagef("flag --steps: %v", err)
	}
	bin, err := provision.FindRelay(o.RelayBinary)
	if err != nil {
		return err
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Dir(o.Inventory)
	}
	if st, err := os.Stat(o.OutDir); err != nil || !st.IsDir() {
		return cli.Usagef("flag --out: %s is not a directory", o.OutDir)
	}
	fleet, _, err := inventories.LoadFleetFile(o.Inventory)
	if err != nil {
		return err
	}
	// The coefficients a load test cannot measure are kept from the
	// calibration fleet plan reads now.
	calPath := inventories.Beside(o.Inventory, inventories.CalibrationFile)
	current, err := inventories.LoadCalibration(calPath)
	if err != nil {
		return err
	}
	f, err := o.Open(fleet)
	if err != nil {
		return err
	}
	// The relays verify tokens: the publisher and the listeners get
	// tokens for Prefix signed with the fleet's key.
	_, keys, err := f.AuthKeys(ctx, false)
	if err != nil {
		return err
	}
	signer, err := provision.SigningKey(keys)
	if err != nil {
		return err
	}
	pubTok, err := o.Sign(signer.Seed, Prefix, "", true, false, TokenTTL)
	if err != nil {
		return err
	}
	subTok, err := o.Sign(signer.Seed, "", Prefix, false, true, TokenTTL)
	if err != nil {
		return err
	}
	pubTokFile, subTokFile, removeTokens, err := TokenFiles(pubTok, subTok)
	if err != nil {
		return err
	}
	defer removeTokens()
	targets, cleanup, err := f.SteadyTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	var names []string
	for _, t := range targets {
		names = append(names, t.Host.Name)
	}
	i, tg, err := MatchTarget(names, o.Target)
	if err != nil {
		return cli.Usagef("flag --target: %v", err)
	}
	box := targets[i]
	isLab := false
	for _, g := range fleet.Steady {
		isLab = isLab || g.Provider == "lab"
	}
	lt := &Tester{
		Bin: bin, Box: box, Steps: steps, Dur: o.StepDuration, Ramp: o.Ramp, Quiet: o.JSON, Out: o.Out,
		PubTokenFile: pubTokFile, SubTokenFile: subTokFile,
	}
	if lt.Addr, _, err = net.SplitHostPort(box.Host.Addr()); err != nil {
		return fmt.Errorf("%s: address %q: %v", box.Host, box.Host.Address, err)
	}
	ports, insts, err := Ports(ctx, box.Run, tg.Port)
	if err != nil {
		return fmt.Errorf("%s: %w", box.Host, err)
	}
	lt.Ports = ports
	switch {
	case len(lt.Ports) == 0 && tg.Port != 0:
		return cli.Usagef("flag --target: %s has no active relay@%d.service (active: %s)", box.Host, tg.Port, strings.Join(insts, ", "))
	case len(lt.Ports) == 0:
		return fmt.Errorf("%s has no active relay process; converge it first (fleet converge --inventory %s)", box.Host, o.Inventory)
	case steps[0] < len(lt.Ports):
		return cli.Usagef("flag --steps: %d listeners cannot be spread over %d relay processes", steps[0], len(lt.Ports))
	}
	most := slices.Max(steps)
	note, err := CheckUncapped(o.Inventory, fleet.Access, LocalAddrToward(lt.Addr), (most+len(lt.Ports)-1)/len(lt.Ports))
	if err != nil {
		return err
	}
	if note != "" && !o.JSON {
		fmt.Fprintf(o.Out, "note: %s\n", note)
	}
	return lt.measure(ctx, o, current, calPath, isLab)
}

// CheckUncapped checks that the relays' per-address session cap lets the
// load generator's listeners in: perProcess of them on each relay
// process, all from this machine (local: its address toward the box).
// With access.load_generators empty nothing exempts them: a usage error
// naming the field. With a list that does not hold local, a note: the
// relays may see another address (a NAT's), which the list may hold.
func CheckUncapped(inventory string, a inventories.Access, local netip.Addr, perProcess int) (note string, err error) {
	limit := a.SessionsPerAddress()
	if limit == 0 || perProcess <= limit {
		return "", nil
	}
	if len(a.LoadGenerators) == 0 {
		return "", cli.Usagef("%s: access.load_generators: empty, and the fleet's relays admit %d sessions from one address while this load test opens up to %d a relay process from this machine (%s): list its address there and run fleet converge", inventory, limit, perProcess, local)
	}
	if local.IsValid() && !a.Uncapped(local) {
		return fmt.Sprintf("this machine's address toward the box, %s, is not in access.load_generators: unless the relays see it as one that is (behind a NAT), they admit %d of the %d listeners a process", local, limit, perProcess), nil
	}
	return "", nil
}

// LocalAddrToward is the address this machine sends from to host (a UDP
// socket connected to it: no packet is sent); the zero Addr when none.
func LocalAddrToward(host string) netip.Addr {
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// measure runs the steps and writes the calibration, the result on o.Out.
func (lt *Tester) measure(ctx context.Context, o Options, current *inventories.Calibration, calPath string, isLab bool) error {
	info, err := lt.BoxInfo(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	shared := GeneratorNote(host, runtime.NumCPU(), isLab)
	if !o.JSON {
		fmt.Fprintln(o.Out, lt.Header(o.Target, info))
		fmt.Fprintf(o.Out, "note: %s\n", shared)
	}
	res, runErr := lt.Run(ctx)
	if runErr != nil && ctx.Err() != nil {
		return runErr
	}
	doc := Doc{Target: o.Target, MeasuredOn: MeasuredOn(o.Target, info), Date: time.Now().UTC().Format(time.DateOnly), Generator: shared, Steps: res}
	fitErr, err := Write(o.OutDir, &doc, current, calPath)
	if err != nil {
		return err
	}
	if runErr != nil && fitErr == nil {
		fitErr = runErr
	}
	if err := doc.WriteResult(o.Out, o.JSON, fitErr); err != nil {
		return err
	}
	if fitErr != nil {
		return fmt.Errorf("no calibration written: %w", fitErr)
	}
	return nil
}
