package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/units"
)

// eventsInstallCommand is fleet events install [-- RECONCILE-FLAGS].
func eventsInstallCommand(ios *cli.IOStreams) *cobra.Command {
	var f events.TimerOptions
	var noEnable bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "the systemd timer that runs reconcile every minute, and the events exporter",
		Long: `Write the systemd service and timer that run fleet events reconcile every
--interval on this host, and the service that runs fleet events exporter
(--exporter-listen: the reconciler's heartbeat and every burst box the
backends list, on /metrics, for fleet monitor --events-exporter), then
enable both. Arguments after -- are further reconcile flags (such as
--lab-dir DIR), passed as they are; the exporter gets those it takes too.

The service runs as root (or --user): every file it runs or reads (the
fleet binary, the events, fleet and providers files, the state dir and
what is in it, the environment file, paths after -- such as --pulumi)
must be root's (or --user's), in directories no one else can write, or
install refuses it. Install the binary first:
install -o root -g root -m 0755 bin/fleet /usr/local/bin/`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usagef("unexpected argument %q (reconcile flags go after --)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.Enable, f.ExtraArgs = !noEnable, args
			return events.Install(cmd.Context(), ios.Out, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.Events, "events", "", "events file the reconciler follows (required)")
	fs.StringVar(&f.StateDir, "state-dir", "", "state directory the reconciler uses (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet of the user running install)")
	fs.StringVar(&f.Fleet, "fleet-binary", "", "the fleet binary the timer runs, root's (default: this one)")
	fs.DurationVar(&f.Interval, "interval", units.DefaultReconcileInterval, "how often the reconciler runs (at least "+units.MinReconcileInterval.String()+")")
	cli.Ranged(fs, "interval", cli.Durations(units.MinReconcileInterval, 24*time.Hour))
	fs.StringVar(&f.User, "user", "", "user the reconciler runs as (default root; lab events need root)")
	fs.StringVar(&f.EnvironmentFile, "environment-file", "", "file with HCLOUD_TOKEN=, DIGITALOCEAN_TOKEN=, PULUMI_CONFIG_PASSPHRASE= (or PULUMI_CONFIG_PASSPHRASE_FILE=) lines, and for a fleet file whose state.backend is s3:// the store's AWS_ACCESS_KEY_ID= and AWS_SECRET_ACCESS_KEY= (or AWS_SHARED_CREDENTIALS_FILE=): root's, mode 0600, in directories only root can write (systemd reads it for a service run as root); required with a shared state.backend")
	fs.StringVar(&f.UnitDir, "unit-dir", units.ReconcilerDir, "where the unit files are written")
	fs.StringVar(&f.ExporterListen, "exporter-listen", units.DefaultExporterListen, "HOST:PORT the events exporter serves /metrics on")
	fs.BoolVar(&noEnable, "no-enable", false, "write the unit files only: no systemctl daemon-reload, no enable --now, no exporter restart")
	return cmd
}
