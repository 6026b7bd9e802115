// Package loadtest is fleet loadtest's logic: it measures relay processes
// on one box under steps of listeners (the relay's own load generator and
// publisher run on this machine, the box is sampled over SSH), fits the
// curve of CPU and memory against listeners, and writes what fleet plan
// reads (calibration.yaml) beside loadtest.json and an SVG of the curve.
// The trust checks hold throughout: the load generator and the publisher
// pin the certificate and key hashes read on the box over SSH, never
// fetched over plain HTTP.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
	"github.com/relayfleet/relayfleet/internal/plot"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/procstat"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// Files a load test writes beside the calibration.
const (
	JSONFile = "loadtest.json"
	SVGFile  = "loadtest.svg"
)

// WireOverhead is what QUIC, UDP and IP headers add to the load
// generator's payload bitrate (it counts frame payloads only).
const WireOverhead = 1.25

// MinFitSteps is how many measured steps a calibration needs.
const MinFitSteps = 3

// Step is one step of the curve: what the relay process(es)
// used while serving a number of listeners.
type Step struct {
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

func (s Step) drops() int64 { return s.FramesLost + s.LateFrames + s.RcvbufErrors }

// Fit is the straight lines through the measured steps.
type Fit struct {
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
	// WireBitrate that times WireOverhead.
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

// FitSteps fits the curve through the steps that succeeded. It refuses
// fewer than MinFitSteps steps and lines that do not rise.
func FitSteps(steps []Step) (Fit, error) {
	var ok []Step
	for _, s := range steps {
		if s.Error == "" && s.Listeners > 0 {
			ok = append(ok, s)
		}
	}
	if len(ok) < MinFitSteps {
		return Fit{}, fmt.Errorf("only %d of %d steps succeeded; a calibration needs at least %d measured steps", len(ok), len(steps), MinFitSteps)
	}
	var x, cpu, rss []float64
	var bitrate float64
	for _, s := range ok {
		x = append(x, float64(s.Listeners))
		cpu = append(cpu, s.CPUCores)
		rss = append(rss, float64(s.RSSBytes))
		bitrate += s.BitrateBps
	}
	f := Fit{Steps: len(ok)}
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
	f.WireBitrate = f.PayloadBitrate * WireOverhead
	return f, nil
}

// Doc is loadtest.json and the --json output.
type Doc struct {
	Target     string            `json:"target"`
	MeasuredOn string            `json:"measured_on"`
	Date       string            `json:"date,omitempty"`
	Generator  string            `json:"generator"`
	Steps      []Step            `json:"steps"`
	Fit        *Fit              `json:"fit"`
	Files      map[string]string `json:"files,omitempty"`
}

// BoxFacts is what the target box says about itself.
type BoxFacts struct {
	Hostname, CPU, Release string
	Cores                  int
}

// Describe is the box in a few words: hostname, cores, CPU, release.
func (b BoxFacts) Describe() string {
	return fmt.Sprintf("%s, %s %s, relay %s", b.Hostname, text.Plural(b.Cores, "core", "cores"), b.CPU, text.ShortSHA(b.Release))
}

func MeasuredOn(target string, b BoxFacts) string {
	return fmt.Sprintf("%s on %s, %s", target, b.Describe(), time.Now().UTC().Format(time.DateOnly))
}

// Tester drives the steps against one box.
type Tester struct {
	// Bin is the relay binary run here as the publisher and the load
	// generator.
	Bin string
	// Box is the box measured, Addr its address as the load generator
	// reaches it, Ports the relay processes measured (relay@PORT).
	Box   provision.Target
	Addr  string
	Ports []int
	// Steps are the listener counts, one step each, Dur the measurement
	// of a step once every listener connected, Ramp the listeners started
	// per second.
	Steps []int
	Dur   time.Duration
	Ramp  float64
	// Out gets the table of steps as they finish, unless Quiet.
	Quiet bool
	Out   io.Writer
	// PubTokenFile and SubTokenFile hold the tokens that let the
	// publisher and the listeners in under Prefix (relay --token-file).
	PubTokenFile, SubTokenFile string
	// NoAckFrequency runs listeners whose QUIC lacks the ACK frequency
	// extension (relay loadgen --ack-frequency=false), as Chromium's does:
	// they acknowledge every audio packet whatever the relay asks.
	NoAckFrequency bool
	// Router, when set, is a router's URL the listeners ask for a relay
	// (relay loadgen --router), instead of each process's own URL; the
	// box then runs one measured process. Stop, when set, ends the steps
	// after the first one it is true for.
	Router string
	Stop   func(Step) bool
}

// The broadcast prefix a load test publishes and listens under, and how
// long its tokens last.
const (
	Prefix   = "loadtest/"
	TokenTTL = 12 * time.Hour
)

// URL is the relay process on port, as the load generator reaches it.
func (lt *Tester) URL(port int) string {
	return "http://" + net.JoinHostPort(lt.Addr, strconv.Itoa(port)) + "/"
}

// tokenArgs is --token-file FILE, or nothing without a file.
func tokenArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{"--token-file", file}
}

// BoxInfo asks the box about itself.
func (lt *Tester) BoxInfo(ctx context.Context) (BoxFacts, error) {
	out, err := lt.Box.Run.Run(ctx, `hostname; nproc; sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1`, nil)
	if err != nil {
		return BoxFacts{}, fmt.Errorf("%s: %w", lt.Box.Host, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var b BoxFacts
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
	if b.Release, _, err = (provision.Releases{}).Current(ctx, lt.Box.Run); err != nil {
		return b, fmt.Errorf("%s: %w", lt.Box.Host, err)
	}
	if b.Release == "" {
		b.Release = "unknown"
	}
	return b, nil
}

// Run publishes on every measured process, then runs the steps in
// order. A failed step is recorded and the next one runs.
func (lt *Tester) Run(ctx context.Context) ([]Step, error) {
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
		return nil, fmt.Errorf("read the relays' key hashes: %s", text.OneLine(err))
	}
	for _, port := range lt.Ports {
		spki := keys.Procs[port].SPKI
		if spki == "" {
			return nil, fmt.Errorf("relay on port %d reported no spki_sha256 in /stats", port)
		}
		cmd := exec.CommandContext(pctx, lt.Bin, append([]string{"publish", "--paced", "--interval", "120ms", "--name", broadcastName(port), lt.URL(port) + "#spki=" + spki}, tokenArgs(lt.PubTokenFile)...)...)
		p := publisher{url: lt.URL(port), stderr: &tailBuffer{max: 4096}, exited: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = io.Discard, p.stderr
		cmd.WaitDelay = 3 * time.Second
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start the publisher: %w", err)
		}
		go func() { cmd.Wait(); close(p.exited) }()
		pubs = append(pubs, p)
	}
	// Let the publishers announce before the first listener asks.
	if err := ctxtime.Sleep(ctx, 1500*time.Millisecond); err != nil {
		return nil, err
	}
	if !lt.Quiet {
		fmt.Fprintf(lt.Out, "\n%-5s %9s %9s %9s %10s %8s %8s %9s %7s %8s %16s\n", "STEP", "LISTENERS", "CPU", "RSS", "LOST", "LATE", "RCVBUF", "GAP MAX", "SILENT", "SECONDS", "BITRATE/LISTENER")
	}
	var res []Step
	for n, want := range lt.Steps {
		for _, p := range pubs {
			select {
			case <-p.exited:
				return res, fmt.Errorf("the publisher for %s exited: %s", p.url, lastLine(p.stderr.String()))
			default:
			}
		}
		s := lt.step(ctx, want)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res = append(res, s)
		if !lt.Quiet {
			label := fmt.Sprintf("%d/%d", n+1, len(lt.Steps))
			if s.Error != "" {
				fmt.Fprintf(lt.Out, "%-5s %9d  FAILED: %s\n", label, want, s.Error)
			} else {
				fmt.Fprintf(lt.Out, "%-5s %9d %8.1f%% %9s %10d %8d %8d %6.0f ms %7d %8.1f %16s\n", label, s.Listeners, 100*s.CPUCores,
					inventories.Bytes(s.RSSBytes).IEC(), s.FramesLost, s.LateFrames, s.RcvbufErrors, s.GapMsMax, s.SilentAtEnd, s.Seconds,
					inventories.BitRate(math.Round(s.BitrateBps)))
			}
		}
		// Let the listeners of this step leave before the next one.
		lt.waitIdle(ctx, 15*time.Second)
		if lt.Stop != nil && lt.Stop(s) {
			break
		}
	}
	return res, nil
}

func broadcastName(port int) string { return fmt.Sprintf(Prefix+"%d", port) }

// step runs one step: the load generator for every process at once, the
// box sampled all along.
func (lt *Tester) step(ctx context.Context, want int) Step {
	st := Step{Target: want}
	// Each process's certificate hash, read on the box over SSH: the load
	// generator pins it instead of fetching it over plain HTTP.
	first, err := lt.sample(ctx)
	if err != nil {
		st.Error = fmt.Sprintf("read the relays' certificate hashes: %s", text.OneLine(err))
		return st
	}
	for _, port := range lt.Ports {
		if first.Procs[port].CertHash == "" {
			st.Error = fmt.Sprintf("relay on port %d reported no certificate_sha256 in /stats", port)
			return st
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gens := lt.Ports
	if lt.Router != "" {
		gens = lt.Ports[:1] // one load generator asks the router
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
	interval := min(2*time.Second, max(500*time.Millisecond, lt.Dur/8))
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
			st.Error = fmt.Sprintf("load generator on %s: %s", lt.URL(lt.Ports[i]), text.OneLine(err))
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
	if err := measureWindow(&st, samples, lt.Ports); err != nil {
		if sampleErr != nil {
			err = fmt.Errorf("%v (sampling the box: %v)", err, sampleErr)
		}
		st.Error = err.Error()
	}
	return st
}

// addReports adds up the load generator's reports, one per process, into
// st, and returns the bitrate summed over the connected listeners.
func addReports(st *Step, reports []loadgen.Report) (bitrate float64) {
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
func measureWindow(st *Step, samples []boxSample, ports []int) error {
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
func (lt *Tester) loadgen(ctx context.Context, port, n int, certHash string) (loadgen.Report, error) {
	var rep loadgen.Report
	target := []string{"--url", lt.URL(port), "--certificate-sha256", certHash}
	if lt.Router != "" {
		target = []string{"--router", lt.Router}
	}
	cmd := exec.CommandContext(ctx, lt.Bin, append(append(append([]string{"loadgen"}, target...), "--broadcast", broadcastName(port),
		"--listeners", strconv.Itoa(n), "--ramp", strconv.FormatFloat(lt.Ramp, 'g', -1, 64),
		"--duration", lt.Dur.String(), "--json", "--log-level", "error", "--ack-frequency="+strconv.FormatBool(!lt.NoAckFrequency)), tokenArgs(lt.SubTokenFile)...)...)
	var out bytes.Buffer
	eb := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = &out, eb
	cmd.WaitDelay = 3 * time.Second
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(eb.String()); msg != "" {
			return rep, fmt.Errorf("%v: %s", err, lastLine(msg))
		}
		return rep, err
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return rep, fmt.Errorf("read its report: %v", err)
	}
	return rep, nil
}

// waitIdle waits until the measured processes serve no listener.
func (lt *Tester) waitIdle(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		s, err := lt.sample(ctx)
		if err == nil {
			var subs int64
			for _, p := range lt.Ports {
				subs += s.Procs[p].Subscribers
			}
			if subs == 0 {
				return
			}
		}
		if ctxtime.Sleep(ctx, 500*time.Millisecond) != nil {
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

func (lt *Tester) sample(ctx context.Context) (boxSample, error) {
	out, err := lt.Box.Run.Run(ctx, SampleScript(lt.Ports), nil)
	if err != nil {
		return boxSample{}, err
	}
	return parseSample(string(out))
}

// SampleScript reads, on the box, the clock, each process's CPU time and
// memory from its cgroup, its /stats, and the process itself (package
// relay/procstat: its CPU time, and its network namespace's UDP counters,
// RcvbufErrors among them). The cgroup is systemd's ControlGroup under
// cgroup v2, or under the unified and v1 hierarchies of a hybrid host
// (lab boxes); without either, systemd's accounting, and for CPU at last
// the main process's own CPU time.
func SampleScript(ports []int) string {
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
if [ -n "$pid" ] && [ "$pid" != 0 ]; then
%s
fi
printf 'stats '
{ exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET /stats HTTP/1.0\r\n\r\n' >&3 && sed '1,/^\r$/d' <&3 | tr -d '\n'; exec 3<&-; } 2>/dev/null
echo
`, p, p, procstat.Script("$pid"), p)
	}
	return b.String()
}

// parseSample reads SampleScript's output.
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
	var sdCPU, sdMem int64 = -1, -1
	var proc procstat.Files
	rcvbufFrom := 0 // the port whose namespace counters s holds
	flush := func() {
		if port == 0 {
			return
		}
		if p.CPUUsec < 0 && sdCPU >= 0 {
			p.CPUUsec, p.CPUFrom = sdCPU/1000, "systemd CPUUsageNSec"
		}
		if len(proc) > 0 {
			if ps, err := procstat.Parse(proc); err == nil {
				if p.CPUUsec < 0 {
					p.CPUUsec, p.CPUFrom = ps.CPU.Microseconds(), "the main process's CPU time"
				}
				if n := ps.RcvbufErrors(); n >= 0 && (rcvbufFrom == 0 || port < rcvbufFrom) {
					s.RcvbufErrors, rcvbufFrom = n, port
				}
			}
		}
		if p.Memory <= 0 && sdMem > 0 {
			p.Memory = sdMem
		}
		s.Procs[port] = p
	}
	for _, line := range lines[1:] {
		if rest, ok := strings.CutPrefix(line, "== "); ok {
			flush()
			port, _ = strconv.Atoi(rest)
			p, sdCPU, sdMem, proc = procSample{CPUUsec: -1}, -1, -1, procstat.Files{}
			continue
		}
		if port == 0 || proc.Add(line) {
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
		case "cgroup":
			p.Cgroup = val
		case "stats":
			if st, err := wire.ParseStats([]byte(val), "subscribers"); err == nil {
				p.Subscribers, p.StatsOK, p.CertHash, p.SPKI = st.Subscribers, true, st.CertificateSHA256, st.SPKISHA256
			}
		}
	}
	flush()
	return s, nil
}

// CalibrationYAML writes calibration.yaml from a fit, keeping from the
// current calibration what a load test below saturation cannot measure.
func CalibrationYAML(f Fit, cur *inventories.Calibration, curPath, measured, date, generator string, steps []Step) []byte {
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
	w("# (%d steps, %s connected listeners).\n", len(counts), ints(counts))
	for _, line := range wrap("Note: "+generator+".", 72) {
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
	w("# %.2f for the QUIC, UDP and IP headers it does not count.\n", WireOverhead)
	br, _ := inventories.BitRate(math.Round(f.WireBitrate)).MarshalYAML()
	w("bitrate_per_listener: %s\n", br)
	w("# Not measured: a policy, %s.\n", kept)
	w("uplink_headroom: %s\n", strconv.FormatFloat(cur.UplinkHeadroom, 'f', -1, 64))
	return []byte(b.String())
}

// WriteCalibration writes calibration.yaml atomically, after checking
// that fleet plan would load it.
func WriteCalibration(path string, data []byte) error {
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

// Draw draws the curve: CPU with the fitted line, memory and
// drops, each against listeners.
func Draw(target string, steps []Step, f *Fit) ([]byte, error) {
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

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

func ints(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

// wrap splits text into lines of at most width characters.
func wrap(text string, width int) []string {
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

// Ports lists the relay processes to measure on a box: the port of every
// active relay@PORT.service, or only port when it is not 0. It returns
// the active units too, for the error that names them.
func Ports(ctx context.Context, run provision.Runner, port int) (ports []int, active []string, err error) {
	active, err = provision.ActiveInstances(ctx, run)
	if err != nil {
		return nil, nil, err
	}
	for _, u := range active {
		p, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(u, "relay@"), ".service"))
		if err == nil && (port == 0 || p == port) {
			ports = append(ports, p)
		}
	}
	return ports, active, nil
}

// Write writes loadtest.json and loadtest.svg into dir and, when the
// steps fit a curve, calibration.yaml (keeping from cur, the calibration
// read from curPath, what a load test does not measure). It fills in
// doc.Fit and doc.Files; fitErr says why no calibration was written.
func Write(dir string, doc *Doc, cur *inventories.Calibration, curPath string) (fitErr, err error) {
	fit, fitErr := FitSteps(doc.Steps)
	if fitErr == nil {
		doc.Fit = &fit
	}
	files := map[string]string{}
	jsonPath := filepath.Join(dir, JSONFile)
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fitErr, err
	}
	if err := atomicfile.Write(jsonPath, append(data, '\n'), 0o644); err != nil {
		return fitErr, err
	}
	files["json"] = jsonPath
	svgPath := filepath.Join(dir, SVGFile)
	svg, err := Draw(doc.Target, doc.Steps, doc.Fit)
	if err != nil {
		return fitErr, fmt.Errorf("draw the curve: %w", err)
	}
	if err := atomicfile.Write(svgPath, svg, 0o644); err != nil {
		return fitErr, err
	}
	files["svg"] = svgPath
	if fitErr == nil {
		calOut := filepath.Join(dir, inventories.CalibrationFile)
		text := CalibrationYAML(fit, cur, curPath, doc.MeasuredOn, doc.Date, doc.Generator, doc.Steps)
		if err := WriteCalibration(calOut, text); err != nil {
			return fitErr, err
		}
		files["calibration"] = calOut
	}
	doc.Files = files
	return fitErr, nil
}

// Summary is the fit in one line, for the terminal.
func (f Fit) Summary() string {
	return fmt.Sprintf("fit over %d steps: %.3g cores per listener, %+.3g at rest (r² %.2f): %g listeners per core; %s RAM per listener; %s payload per listener, %s with headers (x%.2f)",
		f.Steps, f.CPUPerListener, f.CPUIntercept, f.CPUR2, f.ListenersPerCore,
		inventories.Bytes(math.Round(f.RAMPerListener)), inventories.BitRate(math.Round(f.PayloadBitrate)),
		inventories.BitRate(math.Round(f.WireBitrate)), WireOverhead)
}

// Header is the line the load test starts with.
func (lt *Tester) Header(target string, info BoxFacts) string {
	return fmt.Sprintf("loadtest %s (%s): %s at %s, steps %s listeners, %v measured each, ramp %g/s",
		target, info.Describe(), text.Plural(len(lt.Ports), "relay process", "relay processes"), lt.Addr, ints(lt.Steps), lt.Dur, lt.Ramp)
}
