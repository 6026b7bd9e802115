package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision/loadtest"
	"github.com/relayfleet/relayfleet/relay"
)

// loadtestOpts are fleet loadtest's flags.
type loadtestOpts struct {
	hf                                 hostFlags
	target, steps, relayBinary, outDir string
	stepDur                            time.Duration
	ramp                               float64
	asJSON                             bool
}

func loadtestCommand(ios *cli.IOStreams) *cobra.Command {
	var o loadtestOpts
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "measure a box or a relay process: the load curve (listeners against CPU, RSS, drops), calibration.yaml for plan, loadtest.svg",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoadtest(cmd.Context(), &o, ios)
		},
	}
	fs := cmd.Flags()
	o.hf.add(fs)
	fs.StringVar(&o.target, "target", "", "BOX (a steady host's name, as fleet hosts lists it) or BOX:PORT for one relay process (required)")
	fs.StringVar(&o.steps, "steps", loadtest.DefaultSteps(runtime.NumCPU()), "listener counts, one step each (sized to this machine's cores: the load generator runs here)")
	fs.DurationVar(&o.stepDur, "step-duration", 20*time.Second, "measurement per step, once every listener has connected")
	cli.Ranged(fs, "step-duration", cli.Durations(2*time.Second, time.Hour))
	fs.Float64Var(&o.ramp, "ramp", 200, "listeners started per second")
	cli.Ranged(fs, "ramp", cli.Floats(0.1, 100_000))
	fs.StringVar(&o.relayBinary, "relay-binary", "", "relay binary run here as the load generator and publisher (default: relay beside the fleet binary)")
	fs.StringVar(&o.outDir, "out", "", "directory for calibration.yaml, loadtest.json and loadtest.svg (default: the inventory's directory, where fleet plan reads calibration.yaml)")
	fs.BoolVar(&o.asJSON, "json", false, "print the steps and the fit as JSON")
	return cmd
}

func runLoadtest(ctx context.Context, o *loadtestOpts, ios *cli.IOStreams) error {
	stdout := ios.Out
	hf := &o.hf
	if err := hf.check(); err != nil {
		return err
	}
	if o.target == "" {
		return usagef("flag --target: required (BOX or BOX:PORT)")
	}
	steps, err := loadtest.ParseSteps(o.steps)
	if err != nil {
		return usagef("flag --steps: %v", err)
	}
	bin, err := findRelay(o.relayBinary)
	if err != nil {
		return err
	}
	if o.outDir == "" {
		o.outDir = filepath.Dir(hf.inventory)
	}
	if st, err := os.Stat(o.outDir); err != nil || !st.IsDir() {
		return usagef("flag --out: %s is not a directory", o.outDir)
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	// The coefficients a load test cannot measure are kept from the
	// calibration fleet plan reads now.
	calPath := inventories.Beside(hf.inventory, inventories.CalibrationFile)
	current, err := inventories.LoadCalibration(calPath)
	if err != nil {
		return err
	}
	// The relays verify tokens: the publisher and the listeners get
	// tokens for loadtest/ signed with the fleet's key.
	st, err := hf.stackFor(fleet)
	if err != nil {
		return err
	}
	_, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	pubTok, err := relay.NewToken([]byte(keys[0].Secret), loadtest.Prefix, "", true, false, loadtest.TokenTTL)
	if err != nil {
		return err
	}
	subTok, err := relay.NewToken([]byte(keys[0].Secret), "", loadtest.Prefix, false, true, loadtest.TokenTTL)
	if err != nil {
		return err
	}
	pubTokFile, subTokFile, removeTokens, err := loadtest.TokenFiles(pubTok, subTok)
	if err != nil {
		return err
	}
	defer removeTokens()
	targets, cleanup, err := steadyTargets(ctx, st, hf.sshKey, hf.labDir, ios.ErrOut)
	if err != nil {
		return err
	}
	defer cleanup()
	var names []string
	for _, t := range targets {
		names = append(names, t.Host.Name)
	}
	i, tg, err := loadtest.MatchTarget(names, o.target)
	if err != nil {
		return usagef("flag --target: %v", err)
	}
	box := targets[i]
	isLab := false
	for _, g := range fleet.Steady {
		isLab = isLab || g.Provider == "lab"
	}
	lt := &loadtest.Tester{
		Bin: bin, Box: box, Steps: steps, Dur: o.stepDur, Ramp: o.ramp, Quiet: o.asJSON, Out: stdout,
		PubTokenFile: pubTokFile, SubTokenFile: subTokFile,
	}
	if lt.Addr, _, err = net.SplitHostPort(box.Host.Addr()); err != nil {
		return fmt.Errorf("%s: address %q: %v", box.Host, box.Host.Address, err)
	}
	ports, insts, err := loadtest.Ports(ctx, box.Run, tg.Port)
	if err != nil {
		return fmt.Errorf("%s: %w", box.Host, err)
	}
	lt.Ports = ports
	switch {
	case len(lt.Ports) == 0 && tg.Port != 0:
		return usagef("flag --target: %s has no active relay@%d.service (active: %s)", box.Host, tg.Port, strings.Join(insts, ", "))
	case len(lt.Ports) == 0:
		return fmt.Errorf("%s has no active relay process; converge it first (fleet converge --inventory %s)", box.Host, hf.inventory)
	case steps[0] < len(lt.Ports):
		return usagef("flag --steps: %d listeners cannot be spread over %d relay processes", steps[0], len(lt.Ports))
	}
	info, err := lt.BoxInfo(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	shared := loadtest.GeneratorNote(host, runtime.NumCPU(), isLab)
	if !o.asJSON {
		fmt.Fprintln(stdout, lt.Header(o.target, info))
		fmt.Fprintf(stdout, "note: %s\n", shared)
	}

	res, runErr := lt.Run(ctx)
	if runErr != nil && ctx.Err() != nil {
		return runErr
	}
	doc := loadtest.Doc{Target: o.target, MeasuredOn: loadtest.MeasuredOn(o.target, info), Date: time.Now().UTC().Format(time.DateOnly), Generator: shared, Steps: res}
	fitErr, err := loadtest.Write(o.outDir, &doc, current, calPath)
	if err != nil {
		return err
	}
	if runErr != nil && fitErr == nil {
		fitErr = runErr
	}
	if err := doc.WriteResult(stdout, o.asJSON, fitErr); err != nil {
		return err
	}
	if fitErr != nil {
		return fmt.Errorf("no calibration written: %w", fitErr)
	}
	return nil
}
