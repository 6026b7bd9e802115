package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
	"github.com/relayfleet/relayfleet/sysctl"
)

// demoFleet is the demo's fleet file: two origin boxes the publisher
// publishes to, and the steady edges that pull from both, pinned to the
// keys the fleet made for the origins.
func demoFleet() string {
	return `# The demo's fleet: two small lab boxes as origins (the publisher
# publishes to them), and a steady fleet of two medium lab boxes (2 cores,
# 2 GiB: two relay processes each), the edges, pulling broadcasts from
# both origins, each pinned to the key the fleet made for it.
version: 1
name: demo
origins:
  provider: lab
  shape: small
  count: 2
# Every relay verifies tokens signed with the fleet's key: publishing needs
# one (the demo's publisher gets it from fleet token), listening under
# live/ does not. Each relay admits 64 sessions per source address, but
# the demo's load generators run on this host (its lab bridge address),
# so their sessions are not counted.
access:
  public_listen: [live/]
  load_generators: [` + netip.MustParsePrefix(labSubnet).Masked().Addr().Next().String() + `]
steady:
  - name: steady
    provider: lab
    shape: medium
    count: 2
    processes: auto
    base_port: 4443
`
}

func (d *demo) run(ctx context.Context) error {
	for _, dir := range []string{d.work, d.path("logs"), d.path("report")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := d.preflight(ctx); err != nil {
		return err
	}
	const of = 8
	steps := []struct {
		title string
		f     func(context.Context) error
	}{
		{"the plan: the story's 100,000 listeners, then this demo's", d.plan},
		{"fleet up: 2 origin boxes and a steady fleet of 2 lab boxes through Pulumi, converged", d.up},
		{"a real Opus stream: ffmpeg (libopus, 48 kHz mono, 120 ms frames, voip) into both origins", d.publish},
		{"listeners ramped through the router", d.ramp},
		{"an event: a burst box up before it, taking new listeners", d.eventUpStep},
		{"the event ends: drained, destroyed, orphan check", d.eventDown},
		{"a rolling upgrade of the relay with listeners attached", d.rollout},
		{"the report", d.report},
	}
	for i, s := range steps {
		if err := d.step(ctx, i+1, of, s.title, func() error { return s.f(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) preflight(ctx context.Context) error {
	for _, b := range []string{d.fleetBin(), d.relayBin()} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s: %v (make build)", b, err)
		}
	}
	for _, tool := range []string{"ffmpeg", "systemd-nspawn", "debootstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (make demo installs it with apt-get)", tool)
		}
	}
	if d.pulumi == "" {
		d.pulumi = program.CachedPulumi()
	}
	if _, err := os.Stat(d.pulumi); err != nil {
		return fmt.Errorf("the Pulumi CLI %s: %v (make pulumi)", d.pulumi, err)
	}
	// A previous run that was killed hard may have left boxes: start clean.
	if err := d.cleanup(ctx); err != nil {
		return fmt.Errorf("clearing a previous run: %w", err)
	}
	d.stopping.Store(false) // that cleanup was the previous run's, not this one's end
	for _, p := range []string{"state", "events.yaml", "logs", "report"} {
		os.RemoveAll(d.path(p))
	}
	os.MkdirAll(d.path("logs"), 0o700)
	os.MkdirAll(d.path("report"), 0o700)
	if err := os.WriteFile(d.path("demo.yaml"), []byte(demoFleet()), 0o644); err != nil {
		return err
	}
	// The "new build" for the rollout: the same relay with a marker after
	// its ELF sections, so its digest differs and it runs the same.
	data, err := os.ReadFile(d.relayBin())
	if err != nil {
		return err
	}
	data = append(data, []byte("\nrelayfleet-demo-build-2\n")...)
	return os.WriteFile(d.path("relay-v2"), data, 0o755)
}

func (d *demo) plan(ctx context.Context) error {
	if _, err := d.sh(ctx, -1, d.fleetBin(), "plan", "--listeners", "100000", "--box", "cores=12,ram=64GiB,processes=2", "--calibration", "story"); err != nil {
		return err
	}
	d.say("")
	target := d.listeners + d.eventListeners
	_, err := d.sh(ctx, -1, d.fleetBin(), "plan", "--listeners", fmt.Sprint(target), "--box", "cores=2,ram=2GiB,processes=2")
	return err
}

func (d *demo) up(ctx context.Context) error {
	if _, err := d.sh(ctx, 0, d.fleetBin(), append([]string{"up", "--inventory", d.path("demo.yaml")}, d.stackArgs()...)...); err != nil {
		return err
	}
	// What fleet up made, as fleet lab status --json lists it.
	boxes, err := d.labBoxes(ctx)
	if err != nil {
		return err
	}
	for _, b := range boxes {
		d.say("      lab box %s at %s: %d cores, %d MiB, %s", b.Name, b.Address, b.Cores, b.RAM>>20, b.State)
	}
	// The relay processes, as the stacks list them (fleet hosts --json);
	// the router reads the same from the relays file fleet up wrote.
	if err := d.refreshRelays(ctx); err != nil {
		return err
	}
	d.say("      fleet hosts: %d relay processes for the router, origins %s", len(d.relays()), strings.Join(d.origins(), ", "))
	d.say("")
	// The same stack as fleet up: converge reads the fleet's key from it.
	if _, err := d.sh(ctx, -1, d.fleetBin(), append([]string{"converge", "--inventory", d.path("demo.yaml"), "--lab-dir", labDir}, d.keyArgs()...)...); err != nil {
		return err
	}
	// The relay's kernel settings, read back on a box key by key.
	if err := d.printSysctl(ctx); err != nil {
		return err
	}
	d.say("")
	_, err = d.sh(ctx, -1, d.fleetBin(), append([]string{"status", "--inventory", d.path("demo.yaml"), "--lab-dir", labDir}, d.keyArgs()...)...)
	return err
}

func (d *demo) publish(ctx context.Context) error {
	// The origins are fleet boxes (fleet up made and converged them with
	// the fleet's key): they take the edges' cluster links and the
	// publisher's token, and refuse the rest.
	origins := d.origins()
	if len(origins) == 0 {
		return errors.New("fleet hosts --json lists no origin")
	}
	tok, err := d.token(ctx, "--publish", "live/")
	if err != nil {
		return err
	}
	// The token goes in a file (0600), not on the publisher's command line.
	tokFile := d.path("publish.jwt")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		return err
	}
	// The publisher keeps a session to every origin and sends each the
	// same groups; one that restarts (fleet rollout rolls the origins
	// too) is reconnected while the others carry the stream, and the
	// edges fail over to another origin meanwhile.
	if _, err := d.startStream(origins); err != nil {
		return err
	}
	// Prove it end to end: a listener on an edge relay, which pulls the
	// broadcast from the origin.
	rs := d.relays()
	if len(rs) == 0 {
		return errors.New("fleet hosts --json lists no relay process")
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The box is a container on this machine's lab bridge, so the hash
	// fetched over plain HTTP crosses no network but this machine's own.
	out, err := d.sh(lctx, 3, d.relayBin(), "listen", "--name", broadcast, "--groups", "25", "--trust-http-hash", rs[len(rs)-1].URL)
	if err != nil {
		return fmt.Errorf("no audio through %s: %w", rs[len(rs)-1].URL, err)
	}
	_ = out
	return nil
}

// startStream starts ffmpeg's Opus stream into relay publish to every
// origin in urls (logs publish.log and ffmpeg.log) and returns the
// publisher.
func (d *demo) startStream(urls []string) (*bg, error) {
	ff := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-re",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000",
		"-c:a", "libopus", "-ar", "48000", "-ac", "1", "-b:a", "32k",
		"-frame_duration", "120", "-application", "voip", "-page_duration", "120000", "-f", "ogg", "-")
	pipe, err := ff.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ffLog, _ := os.Create(d.path("logs", "ffmpeg.log"))
	ff.Stderr = ffLog
	ff.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.say("    $ ffmpeg -re -f lavfi -i sine=frequency=440:sample_rate=48000 -c:a libopus -ar 48000 -ac 1 -b:a 32k -frame_duration 120 -application voip -page_duration 120000 -f ogg - \\")
	if err := ff.Start(); err != nil {
		return nil, err
	}
	b := &bg{name: "ffmpeg", cmd: ff, done: make(chan struct{}), log: d.path("logs", "ffmpeg.log")}
	go func() { ff.Wait(); ffLog.Close(); close(b.done) }()
	d.mu.Lock()
	d.procs = append(d.procs, b)
	d.mu.Unlock()
	d.say("      |")
	args := append([]string{"publish", "--ogg", "-", "--name", broadcast, "--token-file", d.path("publish.jwt")}, urls...)
	pub, err := d.start("publish", pipe, d.relayBin(), args...)
	if err != nil {
		b.stop(time.Second)
		return nil, err
	}
	return pub, nil
}

func (d *demo) ramp(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	d.routerURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	if _, err := d.start("router", nil, d.relayBin(), "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", d.path("state", "relays.json"), "--poll", "500ms", "--log-level", "warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, d.routerURL+"/healthz", 10*time.Second); err != nil {
		return err
	}
	d.startSampling()
	d.mark("ramp")
	ramp := max(20, d.listeners/15)
	if _, err := d.start("listeners", nil, d.relayBin(), "loadgen", "--router", d.routerURL, "--broadcast", broadcast,
		"--listeners", fmt.Sprint(d.listeners), "--ramp", fmt.Sprint(ramp), "--duration", "30m", "--reconnect", "--json"); err != nil {
		return err
	}
	return d.waitListeners(ctx, d.listeners, 90*time.Second)
}

// waitListeners waits until the relays serve at least n listeners and
// prints the count per process as it goes.
func (d *demo) waitListeners(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	last := time.Time{}
	for {
		s := d.lastSample()
		if s != nil && s.total() >= n {
			d.say("      %s", s.line())
			return nil
		}
		if s != nil && time.Since(last) > 3*time.Second {
			d.say("      %s", s.line())
			last = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("listeners did not reach %d within %s", n, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// writeEvents writes events.yaml for the demo: the event starts 40 s from
// now with a 40 s lead time, so reconcile brings its box up at once; it lasts 40 s.
func (d *demo) writeEvents(ctx context.Context, start time.Time) error {
	peak, err := d.eventPeak(ctx)
	if err != nil {
		return err
	}
	ev := fmt.Sprintf(`version: 1
fleet: demo.yaml
events:
  - name: demo-show
    start: %s
    end: %s
    peak_listeners: %d
    broadcast: %s
    burst:
      provider: lab
      shape: small
      max: 1
    lead_time: 40s
    drain_time: 30s
`, start.UTC().Format(time.RFC3339), start.Add(40*time.Second).UTC().Format(time.RFC3339), peak, broadcast)
	return os.WriteFile(d.path("events.yaml"), []byte(ev), 0o644)
}

// eventPeak is the event's planned peak: past what the two steady medium
// boxes carry by the shipped calibration, by half of what one small burst
// box adds, so that the event gets exactly one burst box whatever the
// calibration says (fleet plan --json for each shape).
func (d *demo) eventPeak(ctx context.Context) (int, error) {
	medium, err := d.perBox(ctx, "lab/medium")
	if err != nil {
		return 0, err
	}
	small, err := d.perBox(ctx, "lab/small")
	if err != nil {
		return 0, err
	}
	return 2*medium + small/2, nil
}

// perBox is what fleet plan says one box of shape carries.
func (d *demo) perBox(ctx context.Context, shape string) (int, error) {
	var plan struct {
		PerBox struct {
			Capacity int `json:"capacity"`
		} `json:"per_box"`
	}
	args := []string{"plan", "--listeners", "1", "--shape", shape, "--json"}
	if err := d.runJSON(ctx, "fleet "+strings.Join(args, " "), &plan, args...); err != nil {
		return 0, err
	}
	if plan.PerBox.Capacity <= 0 {
		return 0, fmt.Errorf("fleet plan --shape %s: no capacity per box", shape)
	}
	return plan.PerBox.Capacity, nil
}

var eventStart time.Time

func (d *demo) reconcile(ctx context.Context) ([]eventOutcome, error) {
	var outs []eventOutcome
	err := d.fleetJSON(ctx, &outs, append([]string{"events", "reconcile", "--events", d.path("events.yaml"), "--json"}, d.stackArgs()...)...)
	// The event's box came or went: the sampler reads its processes too.
	if rerr := d.refreshRelays(ctx); rerr != nil && err == nil {
		err = rerr
	}
	for _, o := range outs {
		for _, a := range o.Actions {
			d.say("      %s %s: %s", o.Event, a.Action, a.Detail)
		}
		if o.Error != "" {
			d.say("      %s FAILED: %s", o.Event, o.Error)
		}
	}
	return outs, err
}

func (d *demo) eventUpStep(ctx context.Context) error {
	eventStart = time.Now().Add(40 * time.Second).Truncate(time.Second)
	if err := d.writeEvents(ctx, eventStart); err != nil {
		return err
	}
	d.mark("event box up")
	if _, err := d.reconcile(ctx); err != nil {
		return err
	}
	d.eventUp = true
	// New listeners arrive for the event; the router sends them where the
	// headroom is: mostly the new, empty burst box.
	if err := ctxtime.Sleep(ctx, time.Until(eventStart)); err != nil {
		return err
	}
	d.mark("event starts")
	b, err := d.start("event-listeners", nil, d.relayBin(), "loadgen", "--router", d.routerURL, "--broadcast", broadcast,
		"--listeners", fmt.Sprint(d.eventListeners), "--ramp", fmt.Sprint(max(20, d.eventListeners/10)), "--duration", "20s", "--json")
	if err != nil {
		return err
	}
	if err := d.waitListeners(ctx, d.listeners+d.eventListeners*9/10, 60*time.Second); err != nil {
		return err
	}
	// The timer would run reconcile every minute: each run samples the
	// event's listeners for its cost report.
	if _, err := d.reconcile(ctx); err != nil {
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	r, err := readLoad(b)
	if err != nil {
		return err
	}
	d.setLoad("event listeners", r)
	d.say("      event listeners: %s", r.line())
	return nil
}

func (d *demo) eventDown(ctx context.Context) error {
	if err := ctxtime.Sleep(ctx, time.Until(eventStart.Add(41*time.Second))); err != nil {
		return err
	}
	d.mark("event ends")
	// Reconcile until the event is gone (listeners left, or the drain time
	// ran out).
	for i := 0; ; i++ {
		outs, err := d.reconcile(ctx)
		if err != nil {
			return err
		}
		if phaseOf(outs, "demo-show") == "gone" {
			break
		}
		if i > 12 {
			return fmt.Errorf("the event's box was not gone after %d reconciles", i+1)
		}
		if err := ctxtime.Sleep(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	d.eventUp = false
	d.mark("event box gone")
	_, err := d.sh(ctx, -1, d.fleetBin(), "events", "report", "--event", "demo-show", "--state-dir", d.path("state"))
	return err
}

func (d *demo) rollout(ctx context.Context) error {
	d.mark("rollout")
	_, err := d.sh(ctx, -1, d.fleetBin(), append([]string{"rollout", "--inventory", d.path("demo.yaml"), "--lab-dir", labDir,
		"--relay-binary", d.path("relay-v2"), "--listener-wait", "45s", "--canary-bake", "15s"}, d.keyArgs()...)...)
	if err != nil {
		return err
	}
	d.rolledOut = true
	d.mark("rollout done")
	// The rollout moves on once the fleet serves 90% of its listeners
	// again; wait for the rest to finish reconnecting (up to 30 s), then
	// end them and read what they saw over the whole demo.
	if err := d.waitListeners(ctx, d.listeners, 30*time.Second); err != nil {
		d.say("      %v", err)
	}
	if err := ctxtime.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	for _, b := range d.procs {
		if b.name == "listeners" {
			b.stop(30 * time.Second)
			r, err := readLoad(b)
			if err != nil {
				return err
			}
			d.setLoad("steady listeners", r)
			d.say("      steady listeners over the whole demo: %s", r.line())
			if err := r.checkSteady(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *demo) setLoad(name string, r *loadReport) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loads == nil {
		d.loads = map[string]*loadReport{}
	}
	d.loads[name] = r
}

// printSysctl reads the relay profile's keys back on the first steady
// box and prints each against what the profile wants. A lab box shares
// the host's kernel for net.core.*: those keys are refused there (a real
// box takes them; make lab-qemu shows it).
func (d *demo) printSysctl(ctx context.Context) error {
	l, err := lab.New(lab.Config{Dir: labDir, ImageDir: d.images, Bridge: labBridge, Subnet: netip.MustParsePrefix(labSubnet)})
	if err != nil {
		return err
	}
	boxes, err := l.List(ctx, map[string]string{"tier": "steady"})
	if err != nil || len(boxes) == 0 {
		return fmt.Errorf("no steady box to read sysctl on: %v", err)
	}
	prof := sysctl.Relay()
	keys := make([]string, 0, len(prof.Settings))
	for _, s := range prof.Settings {
		keys = append(keys, s.Key)
	}
	var out, errOut bytes.Buffer
	if err := l.Run(ctx, boxes[0].Name, "sysctl -n "+strings.Join(keys, " ")+" | tr '\\t' ' '", nil, &out, &errOut); err != nil {
		return fmt.Errorf("sysctl on %s: %v: %s", boxes[0].Name, err, errOut.String())
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	d.say("      sysctl on %s (%s), read back:", boxes[0].Name, prof.File)
	for i, s := range prof.Settings {
		v := ""
		if i < len(got) {
			v = strings.Join(strings.Fields(got[i]), " ")
		}
		status := "ok"
		if !s.Satisfied(v) {
			status = "refused: a lab box shares the host's net.core (a real box takes it)"
		}
		floor := ""
		if s.AtLeast {
			floor = ">= "
		}
		if v == "" {
			v = "(not visible)"
		}
		d.say("        %-30s want %s%-12s got %-13s %s", s.Key, floor, s.Value, v, status)
	}
	return nil
}
