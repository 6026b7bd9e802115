// Command fleet is relayfleet's operator tool: it plans capacity, shows the
// provider catalogue, provisions the fleet's boxes through Pulumi,
// converges them over SSH, rolls out relay builds, bursts for events,
// load-tests and monitors a fleet of live-audio relays.
//
// main only wires things together; each command lives in its own file and
// errors are mapped to exit codes once, in run. Started as
// pulumi-resource-relayfleet (a symlink to it), the binary is the
// relayfleet Pulumi provider plugin instead.
package main

import (
	"context"
	"os"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
)

func main() {
	// SIGINT and SIGTERM end the command's context: it cleans up and exits
	// 130 or 143 with a line saying so (execute).
	ctx, stop := cli.SignalContext(context.Background())
	if provider.IsPlugin(os.Args[0]) {
		code := provider.Main(ctx)
		stop()
		os.Exit(code)
	}
	code := execute(ctx, os.Args[1:], cli.System())
	stop()
	os.Exit(code)
}
