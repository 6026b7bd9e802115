package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/relayfleet/relayfleet/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Execute(ctx, os.Args[1:], cli.System())
	stop()
	os.Exit(code)
}
