// Command fleet is relayfleet's operator tool: it plans capacity, shows the
// provider catalogue and, in later stages, provisions and converges a fleet
// of live-audio relays.
//
// main only wires things together; each command lives in its own file and
// errors are mapped to exit codes once, in run.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
