package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
	"github.com/relayfleet/relayfleet/provision/loadtest"
)

func planCommand(ios *cli.IOStreams) *cobra.Command {
	o := capacity.PlanOptions{Calibrations: capacity.Calibrations{
		Beside: loadtest.CalibrationBeside, Resolve: loadtest.ResolveCalibration, Calibrate: loadtest.Calibrate,
	}}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "plan capacity for a listener target: boxes, cost, egress",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return capacity.WritePlan(ios.Out, o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.Listeners, "listeners", -1, "target concurrent listeners (required, unless the inventory's regions have audiences)")
	fs.Var(cli.GoValue(&o.RegionListeners), "region-listeners", "each region's audience for an inventory with regions: REGION=N[,REGION=N...] (default: regions[].listeners); plans each region apart")
	cli.Ranged(fs, "listeners", cli.Ints(0, inventories.MaxListeners))
	fs.StringVar(&o.Shape, "shape", "", "plan boxes of one catalogue shape, PROVIDER/SHAPE[@REGION]")
	fs.Var(cli.GoValue(&o.Box), "box", "plan boxes of a given size: cores=N,ram=SIZE[,processes=N|auto][,uplink=RATE]")
	fs.Float64Var(&o.EventHours, "event-hours", 0, "length of the event in hours; 0 plans a month of steady load")
	cli.Ranged(fs, "event-hours", cli.Floats(0, inventories.MaxEventHours))
	fs.StringVar(&o.Inventory, "inventory", "", "fleet file: its steady boxes carry load first, its burst pools the rest")
	fs.StringVar(&o.Providers, "providers", "", "provider catalogue (default: providers.yaml beside the inventory, else the shipped one)")
	fs.Var(cli.GoValue(&o.Calibration), "calibration", "capacity coefficients: "+strings.Join(inventories.CalibrationNames(), " or ")+
		" (shipped), a calibration.yaml, or fleet loadtest's loadtest.json; SHAPE=... for the boxes of one shape (PROVIDER/SHAPE[@REGION], or custom for --box); repeatable (default: calibration.yaml beside the inventory, else "+inventories.DefaultCalibration+")")
	fs.BoolVar(&o.JSON, "json", false, "print the plan as JSON")
	return cmd
}
