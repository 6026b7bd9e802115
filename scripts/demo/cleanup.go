package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
)

// cleanup stops every process the demo started, destroys the event's and
// the steady fleet's stacks, deletes whatever box is left in the demo's
// lab, removes its bridge and mounts, and checks that nothing remains.
func (d *demo) cleanup(ctx context.Context) error {
	if d.stopSampling != nil {
		d.stopSampling()
		d.stopSampling = nil
	}
	d.stopping.Store(true)
	d.mu.Lock()
	procs := d.procs
	d.procs = nil
	d.mu.Unlock()
	// Listeners first, then the stream, the router and the origin.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
	var errs []error
	if _, err := os.Stat(d.path("events.yaml")); err == nil && d.eventUp {
		if _, err := d.sh(ctx, 2, d.fleetBin(), append([]string{"burst", "down", "--event", "demo-show", "--events", d.path("events.yaml"), "--drain-time", "0s"}, d.stackArgs()...)...); err != nil {
			errs = append(errs, err)
		}
	}
	// A fleet whose stacks list hosts is destroyed; without a stack (no
	// fleet up yet), fleet hosts fails and there is nothing to destroy.
	if h, err := d.hosts(ctx); err == nil && len(h.Hosts) > 0 {
		args := dropFlag(append([]string{"destroy", "--yes", "--inventory", d.path("demo.yaml")}, d.stackArgs()...), "--relay-binary")
		if _, err := d.sh(ctx, 1, d.fleetBin(), args...); err != nil {
			errs = append(errs, err)
		}
	}
	// Whatever a cut-off Pulumi run left: the lab itself.
	l, err := lab.New(lab.Config{Dir: labDir, ImageDir: d.images, Bridge: labBridge, Subnet: netip.MustParsePrefix(labSubnet)})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	boxes, err := l.List(ctx, nil)
	if err != nil {
		errs = append(errs, err)
	}
	for _, b := range boxes {
		if err := l.Delete(ctx, b.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.Cleanup(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := verifyClean(ctx, l, procs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func dropFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == name {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// verifyClean checks what the demo could leave: boxes, the bridge, mounts
// under the lab's directory, processes.
func verifyClean(ctx context.Context, l *lab.Lab, procs []*bg) error {
	var left []string
	if bs, err := l.List(ctx, nil); err != nil || len(bs) > 0 {
		left = append(left, fmt.Sprintf("%d lab boxes", len(bs)))
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", labBridge)); err == nil {
		left = append(left, "bridge "+labBridge)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		n := 0
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], labDir+"/") {
				n++
			}
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d mounts under %s", n, labDir))
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			left = append(left, "process "+p.name)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	return nil
}
