// Command demo runs relayfleet's whole story on lab boxes on this machine
// (make demo; root, Linux): the plan, a steady fleet through Pulumi,
// converged; a real Opus stream from ffmpeg; listeners ramped through the
// router; an event whose burst box comes up, takes listeners, drains and
// is destroyed; a rolling upgrade with listeners attached; and a report
// with pictures. It runs the same fleet and relay commands an operator
// would, printing each, and leaves nothing behind, also when interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

func run(ctx context.Context) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	d := &demo{out: os.Stdout}
	fs.StringVar(&d.work, "work", "/var/lib/relayfleet/demo", "working directory: inventory, Pulumi state, logs, the report")
	fs.StringVar(&d.bin, "bin", "bin", "directory holding the fleet and relay binaries (make build)")
	fs.StringVar(&d.pulumi, "pulumi", "", "the Pulumi CLI (default: the make pulumi build)")
	fs.IntVar(&d.listeners, "listeners", 120*runtime.NumCPU(), "steady listeners ramped through the router (sized to this machine)")
	fs.IntVar(&d.eventListeners, "event-listeners", 80*runtime.NumCPU(), "listeners that arrive during the event")
	fs.StringVar(&d.images, "lab-images", "/var/lib/relayfleet/lab/images", "lab image cache (shared with the other labs)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: run as root (lab boxes are systemd-nspawn containers)")
		return 2
	}
	if d.listeners <= 0 || d.eventListeners <= 0 {
		fmt.Fprintln(os.Stderr, "demo: --listeners and --event-listeners must be positive")
		return 2
	}
	var err error
	if d.bin, err = filepath.Abs(d.bin); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	d.started = time.Now()
	err = d.run(ctx)
	// Cleanup runs whatever happened, on a context of its own so that a
	// Ctrl-C does not cut it short.
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cerr := d.cleanup(cctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(d.out, "\ndemo: interrupted; %s\n", leftMsg(cerr))
		return 130
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		fmt.Fprintf(d.out, "demo: %s\n", leftMsg(cerr))
		return 1
	case cerr != nil:
		fmt.Fprintf(os.Stderr, "\ndemo: cleanup: %v\n", cerr)
		return 1
	}
	fmt.Fprintf(d.out, "\ndemo: done in %s; %s\nreport: %s\n", time.Since(d.started).Round(time.Second), leftMsg(nil), filepath.Join(d.work, "report", "report.md"))
	return 0
}

func leftMsg(err error) string {
	if err != nil {
		return "cleanup failed: " + err.Error()
	}
	return "nothing left behind (no lab box, mount, bridge or demo process)"
}
