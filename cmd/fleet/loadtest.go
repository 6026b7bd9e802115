package main

import (
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision/loadtest"
	"github.com/relayfleet/relayfleet/relay"
)

// loadtestCommand is fleet loadtest.
func loadtestCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	o := loadtest.Options{Out: ios.Out, Sign: relay.NewToken, Open: func(f *inventories.Fleet) (loadtest.Fleet, error) { return hf.open(f, ios.ErrOut) }}
	cmd := &cobra.Command{
		Use:   "loadtest",
		Short: "measure a box or a relay process: the load curve (listeners against CPU, RSS, drops), calibration.yaml for plan, loadtest.svg",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Inventory = hf.inventory
			return loadtest.Run(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	fs.StringVar(&o.Target, "target", "", "BOX (a steady host's name, as fleet hosts lists it) or BOX:PORT for one relay process (required)")
	fs.StringVar(&o.Steps, "steps", loadtest.DefaultSteps(runtime.NumCPU()), "listener counts, one step each (sized to this machine's cores: the load generator runs here)")
	fs.DurationVar(&o.StepDuration, "step-duration", 20*time.Second, "measurement per step, once every listener has connected")
	cli.Ranged(fs, "step-duration", cli.Durations(2*time.Second, time.Hour))
	fs.Float64Var(&o.Ramp, "ramp", 200, "listeners started per second")
	cli.Ranged(fs, "ramp", cli.Floats(0.1, 100_000))
	fs.StringVar(&o.RelayBinary, "relay-binary", "", "relay binary run here as the load generator and publisher (default: relay beside the fleet binary)")
	fs.StringVar(&o.OutDir, "out", "", "directory for calibration.yaml, loadtest.json and loadtest.svg (default: the inventory's directory, where fleet plan reads calibration.yaml)")
	fs.BoolVar(&o.JSON, "json", false, "print the steps and the fit as JSON")
	return cmd
}
