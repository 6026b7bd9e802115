// Command relay is the relayfleet relay: relay serve, router, token,
// publish, listen, loadgen, keygen, pin and version. main only wires the
// process to relay/relaycmd, where the commands live.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/relayfleet/relayfleet/relay/cli"
	"github.com/relayfleet/relayfleet/relay/relaycmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := relaycmd.Execute(ctx, os.Args[1:], cli.System())
	stop()
	os.Exit(code)
}
