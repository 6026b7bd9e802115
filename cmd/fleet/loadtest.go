package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/plot"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/cli"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// Files fleet loadtest writes beside the calibration.
const (
	loadtestJSONFile = "loadtest.json"
	loadtestSVGFile  = "loadtest.svg"
)

// wireOverhead is what QUIC, UDP and IP headers add to the load
// generator's payload bitrate (it counts frame payloads only).
const wireOverhead = 1.25

// minFitSteps is how many measured steps a calibration needs.
const minFitSteps = 3

// loadtestStep is one step of the curve: what the relay process(es)
// used while serving a number of listeners.
type loadtestStep struct {
	// Target is the listener count asked for; Listeners those the load
	// generator connected.
	Target    int `json:"target"`
	Listeners int `json:"listeners"`
	// CPUCores is the fraction of one core the relay process(es) used
	// in the measurement window (cgroup CPU time over wall time).
	CPUCores float64 `json:"cpu_cores"`
	// RSSBytes is the relay process(es)' cgroup memory (memory.current),
	// the mean over the window.
	RSSBytes int64 `json:"rss_bytes"`
	// FramesLost is what the publisher sent that a listener should have
	// had and did not (relay loadgen's frames_lost, summed over the
	// processes); FramesExpected what they should have had, LossRatio
	// the one over the other.
	FramesLost     int64   `json:"frames_lost"`
	FramesExpected int64   `json:"frames_expected"`
	LossRatio      float64 `json:"loss_ratio"`
	LateFrames     int64   `json:"late_frames"`
	RcvbufErrors   int64   `json:"rcvbuf_errors"`
	// GapMsMax is the longest audible gap of any listener (from one frame
	// to the next, to the end for one silent then) and GapMsP99 the worst
	// of the processes' 99th percentiles; SilentAtEnd counts the
	// listeners that got no frame in the last silence timeout.
	GapMsMax    float64 `json:"gap_ms_max"`
	GapMsP99    float64 `json:"gap_ms_p99"`
	SilentAtEnd int     `json:"silent_at_end"`
	// BitrateBps is the load generator's mean payload bitrate per
	// listener (headers not included).
	BitrateBps float64 `json:"bitrate_bps"`
	// Seconds is the measurement window (box clock) and Samples how many
	// samples it spans.
	Seconds float64 `json:"seconds"`
	Samples int     `json:"samples"`
	// CPUFrom says where the CPU time was read (cgroup cpu.stat, ...).
	CPUFrom string `json:"cpu_from,omitempty"`
	// ConnectErrors counts, by error, the listeners that could not
	// subscribe (refused by the relay or the router, or timed out).
	ConnectErrors map[string]int `json:"connect_errors,omitempty"`
	Error         string         `json:"error,omitempty"`
}

func (s loadtestStep) drops() int64 { return s.FramesLost + s.LateFrames + s.RcvbufErrors }

// loadtestFit is the straight lines through the measured steps.
type loadtestFit struct {
	Steps int `json:"steps"`
	// CPUPerListener is the slope of cpu_cores against listeners, and
	// CPUIntercept what the relay uses with no listeners.
	CPUPerListener   float64 `json:"cpu_per_listener"`
	CPUIntercept     float64 `json:"cpu_intercept"`
	CPUR2            float64 `json:"cpu_r2"`
	ListenersPerCore float64 `json:"listeners_per_core"`
	// RAMPerListener is the slope of rss_bytes against listeners.
	RAMPerListener float64 `json:"ram_per_listener_bytes"`
	RAMIntercept   float64 `json:"ram_intercept_bytes"`
	// PayloadBitrate is the mean payload bitrate per listener and
	// WireBitrate that times wireOverhead.
	PayloadBitrate float64 `json:"payload_bitrate_bps"`
	WireBitrate    float64 `json:"wire_bitrate_bps"`
}

// linearFit is the least-squares line y = a + b x.
func linearFit(x, y []float64) (slope, intercept, r2 float64, ok bool) {
	n := float64(len(x))
	if len(x) < 2 || len(x) != len(y) {
		return 0, 0, 0, false
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return 0, 0, 0, false
	}
	slope = sxy / sxx
	intercept = my - slope*mx
	r2 = 1.0
	if syy > 0 {
		r2 = sxy * sxy / (sxx * syy)
	}
	return slope, intercept, r2, true
}

// fitSteps fits the curve through the steps that succeeded. It refuses
// fewer than minFitSteps steps and lines that do not rise.
func fitSteps(steps []loadtestStep) (loadtestFit, error) {
	var ok []loadtestStep
	for _, s := range steps {
		if s.Error == "" && s.Listeners > 0 {
			ok = append(ok, s)
		}
	}
	if len(ok) < minFitSteps {
		return loadtestFit{}, fmt.Errorf("only %d of %d steps succeeded; a calibration needs at least %d measured steps", len(ok), len(steps), minFitSteps)
	}
	var x, cpu, rss []float64
	var bitrate float64
	for _, s := range ok {
		x = append(x, float64(s.Listeners))
		cpu = append(cpu, s.CPUCores)
		rss = append(rss, float64(s.RSSBytes))
		bitrate += s.BitrateBps
	}
	f := loadtestFit{Steps: len(ok)}
	var fine bool
	if f.CPUPerListener, f.CPUIntercept, f.CPUR2, fine = linearFit(x, cpu); !fine {
		return f, errors.New("degenerate fit: every step measured the same listener count")
	}
	if f.CPUPerListener <= 0 {
		return f, fmt.Errorf("degenerate fit: CPU does not rise with listeners (slope %.3g cores per listener); the steps are too small or too noisy to calibrate, try larger --steps or a longer --step-duration", f.CPUPerListener)
	}
	f.ListenersPerCore = math.Floor(1 / f.CPUPerListener)
	if f.ListenersPerCore < 1 {
		return f, fmt.Errorf("degenerate fit: %.3g cores per listener is less than one listener per core", f.CPUPerListener)
	}
	f.RAMPerListener, f.RAMIntercept, _, _ = linearFit(x, rss)
	if f.RAMPerListener <= 0 {
		return f, fmt.Errorf("degenerate fit: memory does not rise with listeners (slope %.3g bytes per listener); a relay keeps the memory of earlier, larger loads for a while: measure a freshly restarted relay, or steps above the load it served before", f.RAMPerListener)
	}
	f.PayloadBitrate = bitrate / float64(len(ok))
	if f.PayloadBitrate <= 0 {
		return f, errors.New("degenerate fit: the listeners received nothing (bitrate 0)")
	}
	f.WireBitrate = f.PayloadBitrate * wireOverhead
	return f, nil
}

// loadtestTarget is what --target names: a box, and one process of it
// when Port is set.
type loadtestTarget struct {
	Box  string
	Port int
}

// matchTarget finds --target among the boxes' names: BOX (a lab box name
// or a static host's address as the inventory writes it) or BOX:PORT.
// An exact name wins, so a static address with an SSH port is a box.
func matchTarget(names []string, s string) (int, loadtestTarget, error) {
	if i := slices.Index(names, s); i >= 0 {
		return i, loadtestTarget{Box: s}, nil
	}
	if j := strings.LastIndex(s, ":"); j > 0 {
		box, p := s[:j], s[j+1:]
		if i := slices.Index(names, box); i >= 0 {
			port, err := strconv.Atoi(p)
			if err != nil || port < 1 || port > 65535 {
				return -1, loadtestTarget{}, usagef("flag --target: %q: want BOX or BOX:PORT with a port from 1 to 65535", s)
			}
			return i, loadtestTarget{Box: box, Port: port}, nil
		}
	}
	return -1, loadtestTarget{}, usagef("flag --target: no box %q in the inventory's lab and static groups (boxes: %s)", s, strings.Join(names, ", "))
}

// parseSteps reads --steps: at least minFitSteps distinct positive
// listener counts.
func parseSteps(s string) ([]int, error) {
	var steps []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, usagef("flag --steps: %q is not a positive listener count (want e.g. 100,200,400,600)", f)
		}
		if n > maxStepListeners {
			return nil, usagef("flag --steps: %d is out of range: want listener counts from 1 to %d", n, maxStepListeners)
		}
		if slices.Contains(steps, n) {
			return nil, usagef("flag --steps: %d is given twice", n)
		}
		steps = append(steps, n)
	}
	if len(steps) < minFitSteps {
		return nil, usagef("flag --steps: want at least %d listener counts to fit a curve, got %d", minFitSteps, len(steps))
	}
	slices.Sort(steps)
	return steps, nil
}

// defaultSteps sizes the steps to this machine: the load generator runs
// here, two cores drive about 600 listeners beside a lab box.
func defaultSteps() string {
	m := max(1, runtime.NumCPU()/2)
	var s []string
	for _, n := range []int{100, 200, 400, 600} {
		s = append(s, strconv.Itoa(n*m))
	}
	return strings.Join(s, ",")
}

// loadtestRelayBinary finds the relay binary that runs the load generator and the
// publisher here.
func loadtestRelayBinary(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		path = filepath.Join(filepath.Dir(exe), "relay")
		if _, err := os.Stat(path); err != nil {
			return "", usagef("flag --relay-binary: no relay beside %s; build it with make build or give --relay-binary", exe)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", usagef("flag --relay-binary: %v", err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", usagef("flag --relay-binary: %s is not an executable", path)
	}
	return filepath.Abs(path)
}

func runLoadtest(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	fs := newFlags("loadtest", stdout)
	var hf hostFlags
	hf.add(fs)
	var kf keyFlags
	kf.add(fs)
	target := fs.String("target", "", "BOX (a lab box name or a static host's address, as in the inventory) or BOX:PORT for one relay process (required)")
	stepsFlag := fs.String("steps", defaultSteps(), "listener counts, one step each (sized to this machine's cores: the load generator runs here)")
	stepDur := fs.Duration("step-duration", 20*time.Second, "measurement per step, once every listener has connected")
	ramp := fs.Float64("ramp", 200, "listeners started per second")
	relayBin := fs.String("relay-binary", "", "relay binary run here as the load generator and publisher (default: relay beside the fleet binary)")
	outDir := fs.String("out", "", "directory for calibration.yaml, loadtest.json and loadtest.svg (default: the inventory's directory, where fleet plan reads calibration.yaml)")
	asJSON := fs.Bool("json", false, "print the steps and the fit as JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := hf.check(); err != nil {
		return err
	}
	if *target == "" {
		return usagef("flag --target: required (BOX or BOX:PORT)")
	}
	steps, err := parseSteps(*stepsFlag)
	if err != nil {
		return err
	}
	if *stepDur < 2*time.Second {
		return usagef("flag --step-duration: at least 2s, to sample the relay during the step, got %v", *stepDur)
	}
	if *ramp <= 0 || math.IsInf(*ramp, 0) || math.IsNaN(*ramp) {
		return usagef("flag --ramp: must be a positive number of listeners per second, got %v", *ramp)
	}
	bin, err := loadtestRelayBinary(*relayBin)
	if err != nil {
		return err
	}
	if *outDir == "" {
		*outDir = filepath.Dir(hf.inventory)
	}
	if st, err := os.Stat(*outDir); err != nil || !st.IsDir() {
		return usagef("flag --out: %s is not a directory", *outDir)
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	// The coefficients a load test cannot measure are kept from the
	// calibration fleet plan reads now.
	calPath := inventories.Beside(hf.inventory, inventories.CalibrationFile)
	current, err := inventories.LoadCalibration(calPath)
	if err != nil {
		return err
	}
	// The relays verify tokens: the publisher and the listeners get
	// tokens for loadtest/ signed with the fleet's key.
	st, err := kf.stackFor(fleet)
	if err != nil {
		return err
	}
	_, keys, err := fleetAuthKeys(ctx, openKeyStore(st), false)
	if err != nil {
		return err
	}
	pubTok, err := relay.NewToken([]byte(keys[0].Secret), loadtestPrefix, "", true, false, loadtestTokenTTL)
	if err != nil {
		return err
	}
	subTok, err := relay.NewToken([]byte(keys[0].Secret), "", loadtestPrefix, false, true, loadtestTokenTTL)
	if err != nil {
		return err
	}
	// The relay commands read the tokens from files (0600, in a 0700
	// directory of their own), never from their command lines.
	tokDir, err := os.MkdirTemp("", "fleet-loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tokDir)
	pubTokFile, subTokFile := filepath.Join(tokDir, "publish.jwt"), filepath.Join(tokDir, "subscribe.jwt")
	for f, tok := range map[string]string{pubTokFile: pubTok, subTokFile: subTok} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("token file: %w", err)
		}
	}
	targets, cleanup, err := resolveTargets(ctx, fleet, hf.sshKey, hf.labDir)
	if err != nil {
		return err
	}
	defer cleanup()
	var names []string
	for _, t := range targets {
		names = append(names, t.Host.Name)
	}
	i, tg, err := matchTarget(names, *target)
	if err != nil {
		return err
	}
	box := targets[i]
	isLab := false
	for _, g := range fleet.Steady {
		isLab = isLab || g.Provider == "lab"
	}
	lt := &loadtester{
		bin: bin, box: box, steps: steps, dur: *stepDur, ramp: *ramp, quiet: *asJSON, out: stdout,
		pubTokenFile: pubTokFile, subTokenFile: subTokFile,
	}
	if lt.addr, _, err = net.SplitHostPort(box.Host.Addr()); err != nil {
		return fmt.Errorf("%s: address %q: %v", box.Host, box.Host.Address, err)
	}
	insts, err := provision.ActiveInstances(ctx, box.Run)
	if err != nil {
		return fmt.Errorf("%s: %w", box.Host, err)
	}
	for _, u := range insts {
		p, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(u, "relay@"), ".service"))
		if err == nil && (tg.Port == 0 || p == tg.Port) {
			lt.ports = append(lt.ports, p)
		}
	}
	switch {
	case len(lt.ports) == 0 && tg.Port != 0:
		return usagef("flag --target: %s has no active relay@%d.service (active: %s)", box.Host, tg.Port, strings.Join(insts, ", "))
	case len(lt.ports) == 0:
		return fmt.Errorf("%s has no active relay process; converge it first (fleet converge --inventory %s)", box.Host, hf.inventory)
	case steps[0] < len(lt.ports):
		return usagef("flag --steps: %d listeners cannot be spread over %d relay processes", steps[0], len(lt.ports))
	}
	info, err := lt.boxInfo(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	shared := fmt.Sprintf("the load generator runs on this machine (%s, %d cores) and its CPU limits the steps", host, runtime.NumCPU())
	if isLab {
		shared = fmt.Sprintf("the load generator runs on this machine (%s, %d cores) and shares its CPU with the lab boxes it measures: keep the steps small, read the drops chart before trusting the top steps", host, runtime.NumCPU())
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "loadtest %s (%s): %s at %s, steps %s listeners, %v measured each, ramp %g/s\n",
			*target, info.describe(), loadtestPlural(len(lt.ports), "relay process", "relay processes"), lt.addr, loadtestInts(steps), *stepDur, *ramp)
		fmt.Fprintf(stdout, "note: %s\n", shared)
	}

	res, runErr := lt.run(ctx)
	if runErr != nil && ctx.Err() != nil {
		return runErr
	}
	doc := loadtestDoc{Target: *target, MeasuredOn: measuredOn(*target, info), Date: time.Now().UTC().Format(time.DateOnly), Generator: shared, Steps: res}
	fit, fitErr := fitSteps(res)
	if fitErr == nil {
		doc.Fit = &fit
	}
	if runErr != nil && fitErr == nil {
		fitErr = runErr
	}
	files := map[string]string{}
	jsonPath := filepath.Join(*outDir, loadtestJSONFile)
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(jsonPath, append(data, '\n'), 0o644); err != nil {
		return err
	}
	files["json"] = jsonPath
	svgPath := filepath.Join(*outDir, loadtestSVGFile)
	svg, err := drawLoadtest(*target, res, doc.Fit)
	if err != nil {
		return fmt.Errorf("draw the curve: %w", err)
	}
	if err := atomicfile.Write(svgPath, svg, 0o644); err != nil {
		return err
	}
	files["svg"] = svgPath
	if fitErr == nil {
		calOut := filepath.Join(*outDir, inventories.CalibrationFile)
		text := calibrationYAML(fit, current, calPath, doc.MeasuredOn, doc.Date, shared, res)
		if err := writeCalibration(calOut, text); err != nil {
			return err
		}
		files["calibration"] = calOut
	}
	doc.Files = files
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else {
		if fitErr == nil {
			fmt.Fprintf(stdout, "\nfit over %d steps: %.3g cores per listener, %+.3g at rest (r² %.2f): %g listeners per core; %s RAM per listener; %s payload per listener, %s with headers (x%.2f)\n",
				fit.Steps, fit.CPUPerListener, fit.CPUIntercept, fit.CPUR2, fit.ListenersPerCore,
				inventories.Bytes(math.Round(fit.RAMPerListener)), inventories.BitRate(math.Round(fit.PayloadBitrate)),
				inventories.BitRate(math.Round(fit.WireBitrate)), wireOverhead)
			fmt.Fprintf(stdout, "wrote %s (fleet plan reads calibration.yaml beside the inventory)\n", files["calibration"])
		}
		fmt.Fprintf(stdout, "wrote %s\nwrote %s\n", jsonPath, svgPath)
	}
	if fitErr != nil {
		return fmt.Errorf("no calibration written: %w", fitErr)
	}
	return nil
}

// loadtestDoc is loadtest.json and the --json output.
type loadtestDoc struct {
	Target     string            `json:"target"`
	MeasuredOn string            `json:"measured_on"`
	Date       string            `json:"date,omitempty"`
	Generator  string            `json:"generator"`
	Steps      []loadtestStep    `json:"steps"`
	Fit        *loadtestFit      `json:"fit"`
	Files      map[string]string `json:"files,omitempty"`
}

// boxFacts is what the target box says about itself.
type boxFacts struct {
	Hostname, CPU, Release string
	Cores                  int
}

func (b boxFacts) describe() string {
	return fmt.Sprintf("%s, %s %s, relay %s", b.Hostname, loadtestPlural(b.Cores, "core", "cores"), b.CPU, short(b.Release))
}

func measuredOn(target string, b boxFacts) string {
	return fmt.Sprintf("%s on %s, %s", target, b.describe(), time.Now().UTC().Format(time.DateOnly))
}

// loadtester drives the steps against one box.
type loadtester struct {
	bin   string
	box   provision.Target
	addr  string // the box's address, as the load generator reaches it
	ports []int  // relay processes measured
	steps []int
	dur   time.Duration
	ramp  float64
	quiet bool
	out   io.Writer
	// pubTokenFile and subTokenFile hold the tokens that let the
	// publisher and the listeners in under loadtest/ (relay --token-file).
	pubTokenFile, subTokenFile string
	// router, when set, is a router's URL the listeners ask for a relay
	// (relay loadgen --router), instead of each process's own URL; the
	// box then runs one measured process. stop, when set, ends the steps
	// after the first one it is true for.
	router string
	stop   func(loadtestStep) bool
}

// The broadcast prefix a load test publishes and listens under, and how
// long its tokens last.
const (
	loadtestPrefix   = "loadtest/"
	loadtestTokenTTL = 12 * time.Hour
)

func (lt *loadtester) url(port int) string {
	return "http://" + net.JoinHostPort(lt.addr, strconv.Itoa(port)) + "/"
}

// tokenArgs is --token-file FILE, or nothing without a file.
func tokenArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{"--token-file", file}
}

func (lt *loadtester) boxInfo(ctx context.Context) (boxFacts, error) {
	out, err := lt.box.Run.Run(ctx, `hostname; nproc; sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1`, nil)
	if err != nil {
		return boxFacts{}, fmt.Errorf("%s: %w", lt.box.Host, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var b boxFacts
	if len(lines) > 0 {
		b.Hostname = strings.TrimSpace(lines[0])
	}
	if len(lines) > 1 {
		b.Cores, _ = strconv.Atoi(strings.TrimSpace(lines[1]))
	}
	if len(lines) > 2 {
		b.CPU = strings.TrimSpace(lines[2])
	}
	if b.CPU == "" {
		b.CPU = "(unknown CPU)"
	}
	if b.Release, _, err = (provision.Releases{}).Current(ctx, lt.box.Run); err != nil {
		return b, fmt.Errorf("%s: %w", lt.box.Host, err)
	}
	if b.Release == "" {
		b.Release = "unknown"
	}
	return b, nil
}

// run publishes on every measured process, then runs the steps in
// order. A failed step is recorded and the next one runs.
func (lt *loadtester) run(ctx context.Context) ([]loadtestStep, error) {
	pctx, stop := context.WithCancel(ctx)
	type publisher struct {
		url    string
		stderr *tailBuffer
		exited chan struct{}
	}
	var pubs []publisher
	defer func() {
		stop()
		for _, p := range pubs {
			<-p.exited
		}
	}()
	// Each process's key hash, read on the box over SSH: the publishers
	// pin it instead of fetching a certificate hash over plain HTTP.
	keys, err := lt.sample(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the relays' key hashes: %s", oneLine(err))
	}
	for _, port := range lt.ports {
		spki := keys.Procs[port].SPKI
		if spki == "" {
			return nil, fmt.Errorf("relay on port %d reported no spki_sha256 in /stats", port)
		}
		cmd := exec.CommandContext(pctx, lt.bin, append([]string{"publish", "--paced", "--interval", "120ms", "--name", broadcastName(port), lt.url(port) + "#spki=" + spki}, tokenArgs(lt.pubTokenFile)...)...)
		p := publisher{url: lt.url(port), stderr: &tailBuffer{max: 4096}, exited: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = io.Discard, p.stderr
		cmd.WaitDelay = 3 * time.Second
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start the publisher: %w", err)
		}
		go func() { cmd.Wait(); close(p.exited) }()
		pubs = append(pubs, p)
	}
	// Let the publishers announce before the first listener asks.
	if err := backend.Sleep(ctx, 1500*time.Millisecond); err != nil {
		return nil, err
	}
	if !lt.quiet {
		fmt.Fprintf(lt.out, "\n%-5s %9s %9s %9s %10s %8s %8s %9s %7s %8s %16s\n", "STEP", "LISTENERS", "CPU", "RSS", "LOST", "LATE", "RCVBUF", "GAP MAX", "SILENT", "SECONDS", "BITRATE/LISTENER")
	}
	var res []loadtestStep
	for n, want := range lt.steps {
		for _, p := range pubs {
			select {
			case <-p.exited:
				return res, fmt.Errorf("the publisher for %s exited: %s", p.url, loadtestLastLine(p.stderr.String()))
			default:
			}
		}
		s := lt.step(ctx, want)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res = append(res, s)
		if !lt.quiet {
			label := fmt.Sprintf("%d/%d", n+1, len(lt.steps))
			if s.Error != "" {
				fmt.Fprintf(lt.out, "%-5s %9d  FAILED: %s\n", label, want, s.Error)
			} else {
				fmt.Fprintf(lt.out, "%-5s %9d %8.1f%% %9s %10d %8d %8d %6.0f ms %7d %8.1f %16s\n", label, s.Listeners, 100*s.CPUCores,
					inventories.Bytes(s.RSSBytes).IEC(), s.FramesLost, s.LateFrames, s.RcvbufErrors, s.GapMsMax, s.SilentAtEnd, s.Seconds,
					inventories.BitRate(math.Round(s.BitrateBps)))
			}
		}
		// Let the listeners of this step leave before the next one.
		lt.waitIdle(ctx, 15*time.Second)
		if lt.stop != nil && lt.stop(s) {
			break
		}
	}
	return res, nil
}

func broadcastName(port int) string { return fmt.Sprintf(loadtestPrefix+"%d", port) }

// step runs one step: the load generator for every process at once, the
// box sampled all along.
func (lt *loadtester) step(ctx context.Context, want int) loadtestStep {
	st := loadtestStep{Target: want}
	// Each process's certificate hash, read on the box over SSH: the load
	// generator pins it instead of fetching it over plain HTTP.
	first, err := lt.sample(ctx)
	if err != nil {
		st.Error = fmt.Sprintf("read the relays' certificate hashes: %s", oneLine(err))
		return st
	}
	for _, port := range lt.ports {
		if first.Procs[port].CertHash == "" {
			st.Error = fmt.Sprintf("relay on port %d reported no certificate_sha256 in /stats", port)
			return st
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gens := lt.ports
	if lt.router != "" {
		gens = lt.ports[:1] // one load generator asks the router
	}
	reports := make([]loadgen.Report, len(gens))
	errs := make([]error, len(gens))
	var wg sync.WaitGroup
	for i, port := range gens {
		n := want / len(gens)
		if i < want%len(gens) {
			n++
		}
		wg.Go(func() {
			reports[i], errs[i] = lt.loadgen(sctx, port, n, first.Procs[port].CertHash)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var samples []boxSample
	interval := min(2*time.Second, max(500*time.Millisecond, lt.dur/8))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var sampleErr error
sampling:
	for {
		s, err := lt.sample(sctx)
		if err == nil {
			samples = append(samples, s)
		} else if sctx.Err() == nil {
			sampleErr = err
		}
		select {
		case <-done:
			break sampling
		case <-tick.C:
		}
	}
	for i, err := range errs {
		if err != nil {
			st.Error = fmt.Sprintf("load generator on %s: %s", lt.url(lt.ports[i]), oneLine(err))
			return st
		}
	}
	bitrate := addReports(&st, reports)
	if st.Listeners == 0 {
		st.Error = "no listener connected"
		total, top, topN := 0, "", 0
		for _, r := range reports {
			for e, n := range r.Errors {
				total += n
				if n > topN || n == topN && e < top {
					top, topN = e, n
				}
			}
		}
		if total > 0 {
			st.Error += fmt.Sprintf(" (%d errors, e.g. %s)", total, top)
		}
		return st
	}
	st.BitrateBps = bitrate / float64(st.Listeners)
	if err := measureWindow(&st, samples, lt.ports); err != nil {
		if sampleErr != nil {
			err = fmt.Errorf("%v (sampling the box: %v)", err, sampleErr)
		}
		st.Error = err.Error()
	}
	return st
}

// addReports adds up the load generator's reports, one per process, into
// st, and returns the bitrate summed over the connected listeners.
func addReports(st *loadtestStep, reports []loadgen.Report) (bitrate float64) {
	for _, r := range reports {
		st.Listeners += r.Connected
		st.FramesLost += r.FramesLost
		st.FramesExpected += r.FramesExpected
		st.LateFrames += r.LateFrames
		st.SilentAtEnd += r.SilentAtEnd
		st.GapMsMax = max(st.GapMsMax, r.GapMs.Max)
		st.GapMsP99 = max(st.GapMsP99, r.GapMs.P99)
		bitrate += r.BitrateBpsMean * float64(r.Connected)
		for e, n := range r.Errors {
			if st.ConnectErrors == nil {
				st.ConnectErrors = map[string]int{}
			}
			st.ConnectErrors[e] += n
		}
	}
	if st.FramesExpected > 0 {
		st.LossRatio = float64(st.FramesLost) / float64(st.FramesExpected)
	}
	return bitrate
}

// measureWindow fills in the box's side of a step from the samples taken
// while every connected listener was served.
func measureWindow(st *loadtestStep, samples []boxSample, ports []int) error {
	need := int64(st.Listeners) - max(1, int64(st.Listeners)/100)
	var steady []boxSample
	var most int64
	for _, s := range samples {
		var subs int64
		ok := true
		for _, p := range ports {
			ps, found := s.Procs[p]
			if !found || !ps.StatsOK || ps.CPUUsec < 0 {
				ok = false
			}
			subs += ps.Subscribers
		}
		most = max(most, subs)
		if ok && subs >= need {
			steady = append(steady, s)
		}
	}
	if len(steady) < 2 {
		return fmt.Errorf("the relay served the %d connected listeners in %d samples, 2 needed (most seen %d); lengthen --step-duration", st.Listeners, len(steady), most)
	}
	first, last := steady[0], steady[len(steady)-1]
	wall := last.At.Sub(first.At)
	if wall <= 0 {
		return errors.New("the box's clock did not advance between samples")
	}
	var cpu int64
	for _, p := range ports {
		cpu += last.Procs[p].CPUUsec - first.Procs[p].CPUUsec
	}
	var mem float64
	for _, s := range steady {
		for _, p := range ports {
			mem += float64(s.Procs[p].Memory)
		}
	}
	st.CPUCores = float64(cpu) / float64(wall.Microseconds())
	st.RSSBytes = int64(math.Round(mem / float64(len(steady))))
	if first.RcvbufErrors >= 0 && last.RcvbufErrors >= first.RcvbufErrors {
		st.RcvbufErrors = last.RcvbufErrors - first.RcvbufErrors
	}
	st.Seconds = wall.Seconds()
	st.Samples = len(steady)
	st.CPUFrom = last.Procs[ports[0]].CPUFrom
	return nil
}

// loadgen runs `relay loadgen` against one process, pinning the
// certificate hash certHash, and reads its report.
func (lt *loadtester) loadgen(ctx context.Context, port, n int, certHash string) (loadgen.Report, error) {
	var rep loadgen.Report
	target := []string{"--url", lt.url(port), "--certificate-sha256", certHash}
	if lt.router != "" {
		target = []string{"--router", lt.router}
	}
	cmd := exec.CommandContext(ctx, lt.bin, append(append(append([]string{"loadgen"}, target...), "--broadcast", broadcastName(port),
		"--listeners", strconv.Itoa(n), "--ramp", strconv.FormatFloat(lt.ramp, 'g', -1, 64),
		"--duration", lt.dur.String(), "--json", "--log-level", "error"), tokenArgs(lt.subTokenFile)...)...)
	var out bytes.Buffer
	eb := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = &out, eb
	cmd.WaitDelay = 3 * time.Second
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(eb.String()); msg != "" {
			return rep, fmt.Errorf("%v: %s", err, loadtestLastLine(msg))
		}
		return rep, err
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return rep, fmt.Errorf("read its report: %v", err)
	}
	return rep, nil
}

// waitIdle waits until the measured processes serve no listener.
func (lt *loadtester) waitIdle(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		s, err := lt.sample(ctx)
		if err == nil {
			var subs int64
			for _, p := range lt.ports {
				subs += s.Procs[p].Subscribers
			}
			if subs == 0 {
				return
			}
		}
		if backend.Sleep(ctx, 500*time.Millisecond) != nil {
			return
		}
	}
}

// boxSample is one reading of the box: per process its cgroup CPU time,
// memory and listeners, and the box's UDP receive-buffer drops.
type boxSample struct {
	At           time.Time
	Procs        map[int]procSample
	RcvbufErrors int64 // -1 when unknown
}

type procSample struct {
	Cgroup      string
	CPUUsec     int64  // -1 when unknown
	CPUFrom     string // where CPUUsec was read
	Memory      int64
	Subscribers int64
	StatsOK     bool
	// CertHash is the certificate_sha256 of its /stats: read on the box
	// over SSH, so the load generator pins it without trusting the network.
	CertHash string
	// SPKI is its spki_sha256 (its key's hash), read the same way: the
	// publisher pins it (URL#spki=).
	SPKI string
}

func (lt *loadtester) sample(ctx context.Context) (boxSample, error) {
	out, err := lt.box.Run.Run(ctx, sampleScript(lt.ports), nil)
	if err != nil {
		return boxSample{}, err
	}
	return parseSample(string(out))
}

// sampleScript reads, on the box, the clock, each process's CPU time and
// memory from its cgroup, and its /stats, and /proc/net/snmp. The cgroup
// is systemd's ControlGroup under cgroup v2, or under the unified and v1
// hierarchies of a hybrid host (lab boxes); without either, systemd's
// accounting, and for CPU at last the main process's ticks.
func sampleScript(ports []int) string {
	var b strings.Builder
	b.WriteString("date +%s%N\n")
	for _, p := range ports {
		fmt.Fprintf(&b, `u=relay@%d.service
echo "== %d"
cg=$(systemctl show -p ControlGroup --value "$u")
pid=$(systemctl show -p MainPID --value "$u")
echo "cgroup $cg"
if [ -n "$cg" ]; then
  for d in "/sys/fs/cgroup$cg" "/sys/fs/cgroup/unified$cg"; do
    if [ -r "$d/cpu.stat" ]; then awk '$1=="usage_usec"{print "cpu_usec", $2}' "$d/cpu.stat"; break; fi
  done
  for f in "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage" "/sys/fs/cgroup/cpu,cpuacct$cg/cpuacct.usage"; do
    if [ -r "$f" ]; then echo "cpu_nsec $(cat "$f")"; break; fi
  done
  if [ -r "/sys/fs/cgroup$cg/memory.current" ]; then echo "memory $(cat "/sys/fs/cgroup$cg/memory.current")"
  elif [ -r "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes" ]; then echo "memory $(cat "/sys/fs/cgroup/memory$cg/memory.usage_in_bytes")"
  fi
fi
systemctl show -p CPUUsageNSec -p MemoryCurrent "$u" | sed 's/^CPUUsageNSec=/sd_cpu_nsec /; s/^MemoryCurrent=/sd_memory /'
if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/stat" ]; then
  echo "ticks $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}') $(getconf CLK_TCK)"
fi
printf 'stats '
{ exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET /stats HTTP/1.0\r\n\r\n' >&3 && sed '1,/^\r$/d' <&3 | tr -d '\n'; exec 3<&-; } 2>/dev/null
echo
`, p, p, p)
	}
	b.WriteString("echo '== udp'\ngrep '^Udp:' /proc/net/snmp\n")
	return b.String()
}

// parseSample reads sampleScript's output.
func parseSample(out string) (boxSample, error) {
	s := boxSample{Procs: map[int]procSample{}, RcvbufErrors: -1}
	lines := strings.Split(out, "\n")
	if len(lines) == 0 {
		return s, errors.New("sample: empty answer")
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64)
	if err != nil {
		return s, fmt.Errorf("sample: box clock %q", lines[0])
	}
	s.At = time.Unix(0, ns)
	port := 0
	var p procSample
	var sdCPU, sdMem, ticks int64 = -1, -1, -1
	flush := func() {
		if port == 0 {
			return
		}
		if p.CPUUsec < 0 && sdCPU >= 0 {
			p.CPUUsec, p.CPUFrom = sdCPU/1000, "systemd CPUUsageNSec"
		}
		if p.CPUUsec < 0 && ticks >= 0 {
			p.CPUUsec, p.CPUFrom = ticks, "the main process's ticks"
		}
		if p.Memory <= 0 && sdMem > 0 {
			p.Memory = sdMem
		}
		s.Procs[port] = p
	}
	var udp []string
	for _, line := range lines[1:] {
		if rest, ok := strings.CutPrefix(line, "== "); ok {
			flush()
			port = 0
			if rest == "udp" {
				continue
			}
			port, _ = strconv.Atoi(rest)
			p, sdCPU, sdMem, ticks = procSample{CPUUsec: -1}, -1, -1, -1
			continue
		}
		if strings.HasPrefix(line, "Udp:") {
			udp = append(udp, line)
			continue
		}
		if port == 0 {
			continue
		}
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimSpace(val)
		n, nerr := strconv.ParseInt(val, 10, 64)
		switch key {
		case "cpu_usec":
			if nerr == nil {
				p.CPUUsec, p.CPUFrom = n, "cgroup cpu.stat"
			}
		case "cpu_nsec":
			if nerr == nil && p.CPUUsec < 0 {
				p.CPUUsec, p.CPUFrom = n/1000, "cgroup cpuacct.usage"
			}
		case "memory":
			if nerr == nil {
				p.Memory = n
			}
		case "sd_cpu_nsec":
			if nerr == nil {
				sdCPU = n
			}
		case "sd_memory":
			if nerr == nil {
				sdMem = n
			}
		case "ticks":
			f := strings.Fields(val)
			if len(f) == 2 {
				t, err1 := strconv.ParseInt(f[0], 10, 64)
				hz, err2 := strconv.ParseInt(f[1], 10, 64)
				if err1 == nil && err2 == nil && hz > 0 {
					ticks = t * 1_000_000 / hz
				}
			}
		case "cgroup":
			p.Cgroup = val
		case "stats":
			var doc struct {
				Subscribers *int64 `json:"subscribers"`
				CertHash    string `json:"certificate_sha256"`
				SPKI        string `json:"spki_sha256"`
			}
			if json.Unmarshal([]byte(val), &doc) == nil && doc.Subscribers != nil {
				p.Subscribers, p.StatsOK, p.CertHash, p.SPKI = *doc.Subscribers, true, doc.CertHash, doc.SPKI
			}
		}
	}
	flush()
	if len(udp) == 2 {
		names, vals := strings.Fields(udp[0]), strings.Fields(udp[1])
		if i := slices.Index(names, "RcvbufErrors"); i > 0 && i < len(vals) {
			if n, err := strconv.ParseInt(vals[i], 10, 64); err == nil {
				s.RcvbufErrors = n
			}
		}
	}
	return s, nil
}

// calibrationYAML writes calibration.yaml from a fit, keeping from the
// current calibration what a load test below saturation cannot measure.
func calibrationYAML(f loadtestFit, cur *inventories.Calibration, curPath, measured, date, generator string, steps []loadtestStep) []byte {
	var counts []int
	for _, s := range steps {
		if s.Error == "" && s.Listeners > 0 {
			counts = append(counts, s.Listeners)
		}
	}
	from := curPath
	if name := inventories.CalibrationName(curPath); name != curPath {
		from = "the shipped " + name + " calibration"
	}
	kept := fmt.Sprintf("kept from %s (source: %s)", from, cur.Source)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Capacity coefficients for `fleet plan`, measured by `fleet loadtest`\n")
	w("# (%d steps, %s connected listeners).\n", len(counts), loadtestInts(counts))
	for _, line := range loadtestWrap("Note: "+generator+".", 72) {
		w("# %s\n", line)
	}
	w("version: 1\n")
	w("source: %s\n", inventories.SourceLoadtest)
	w("measured_on: %s\n", strconv.Quote(measured))
	w("date: %s\n", strconv.Quote(date))
	w("# Least-squares slope of the relay's CPU (its cgroup's CPU time) against\n")
	w("# listeners: %.4g cores per listener plus %.4g cores at rest\n", f.CPUPerListener, f.CPUIntercept)
	w("# (r² %.3f); listeners per core is floor(1 / slope).\n", f.CPUR2)
	w("listeners_per_core: %d\n", int64(f.ListenersPerCore))
	w("# Not measured: one UDP socket's drain ceiling shows only at saturation,\n")
	w("# which this load test stays below; %s.\n", kept)
	w("listeners_per_socket: %s\n", strconv.FormatFloat(cur.ListenersPerSocket, 'f', -1, 64))
	w("# Slope of the relay's cgroup memory (memory.current; memory.usage_in_bytes\n")
	w("# under cgroup v1) against listeners, steps in rising order.\n")
	w("ram_per_listener: %s\n", inventories.Bytes(math.Round(f.RAMPerListener)))
	w("# The load generator's mean payload bitrate per listener, %s, times\n", inventories.BitRate(math.Round(f.PayloadBitrate)))
	w("# %.2f for the QUIC, UDP and IP headers it does not count.\n", wireOverhead)
	br, _ := inventories.BitRate(math.Round(f.WireBitrate)).MarshalYAML()
	w("bitrate_per_listener: %s\n", br)
	w("# Not measured: a policy, %s.\n", kept)
	w("uplink_headroom: %s\n", strconv.FormatFloat(cur.UplinkHeadroom, 'f', -1, 64))
	return []byte(b.String())
}

// writeCalibration writes calibration.yaml atomically, after checking
// that fleet plan would load it.
func writeCalibration(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".calibration-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if _, err := inventories.LoadCalibration(tmp.Name()); err != nil {
		return fmt.Errorf("the calibration written does not load: %w", err)
	}
	return atomicfile.Write(path, data, 0o644)
}

// drawLoadtest draws the curve: CPU with the fitted line, memory and
// drops, each against listeners.
func drawLoadtest(target string, steps []loadtestStep, f *loadtestFit) ([]byte, error) {
	var x, cpu, rss, drops []float64
	for _, s := range steps {
		if s.Error != "" {
			continue
		}
		x = append(x, float64(s.Listeners))
		cpu = append(cpu, 100*s.CPUCores)
		rss = append(rss, float64(s.RSSBytes)/(1<<20))
		drops = append(drops, float64(s.drops()))
	}
	cpuChart := plot.Chart{
		Title:  "fleet loadtest " + target + ": relay CPU against listeners",
		XLabel: "listeners", YLabel: "% of a core",
		Series: []plot.Series{{Name: "measured", X: x, Y: cpu}},
	}
	if f != nil && len(x) > 0 {
		lo, hi := slices.Min(x), slices.Max(x)
		cpuChart.Series = append(cpuChart.Series, plot.Series{
			Name: fmt.Sprintf("fit: %g listeners per core", f.ListenersPerCore),
			X:    []float64{lo, hi},
			Y:    []float64{100 * (f.CPUIntercept + f.CPUPerListener*lo), 100 * (f.CPUIntercept + f.CPUPerListener*hi)},
		})
	}
	rssChart := plot.Chart{
		Title:  "relay memory (its cgroup) against listeners",
		XLabel: "listeners", YLabel: "MiB",
		Series: []plot.Series{{Name: "memory", X: x, Y: rss}},
	}
	dropChart := plot.Chart{
		Title:  "drops against listeners (frames lost + late frames + UDP receive-buffer errors)",
		XLabel: "listeners", YLabel: "drops per step",
		Series: []plot.Series{{Name: "drops", X: x, Y: drops}},
	}
	return plot.Stack(cpuChart, rssChart, dropChart)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = b.buf[len(b.buf)-b.max:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func loadtestLastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

func loadtestInts(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

func loadtestPlural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// loadtestWrap splits text into lines of at most width characters.
func loadtestWrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
