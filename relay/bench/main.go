// Command bench measures a relay process under listener load on one
// machine, over loopback, beside the kernel's own cost per packet measured
// in the same run (package floor: CPU time per 520-byte UDP packet to
// 1,000 loopback destinations, with sendmsg and with sendmmsg batches).
//
// For each variant and listener step it runs a fresh relay process (the
// binary given with --relay) several times (--runs, 3 by default), with a
// publisher of paced frames and the load generator (both in this process),
// and prints min, median and max of: listeners per core (the relay
// process's own CPU time from /proc/PID/stat, as a share of one core, per
// listener), the relay's CPU time per UDP packet it sent (its /stats
// udp_packets_sent_total) and that as a multiple of both kernel floors,
// packets per system call, RSS growth per listener (/proc/PID/status
// VmRSS, minus the RSS before the listeners came), and the worst frames
// lost and machine-wide UDP RcvbufErrors (/proc/PID/net/snmp, the relay
// shares this machine's network namespace; all of it read by package
// relay/procstat; the load
// generator's sockets count too). Every run's figures follow, with the
// load average. CPU, RSS, packets and the UDP counters are taken over the
// measurement window only, after every listener has connected. Five
// variants run at every step: the relay's defaults, and each lever turned
// off in turn: sendmmsg batches across connections (--send-batch 64),
// quic-go's ACK delay (--ack-delay 25ms), quic-go's send queue
// (--send-queue), quic-go's probe timeouts (--pto-waits-for-reads=false)
// (--groups adds ~1 s groups); --before BIN adds another
// relay binary's defaults (`make bench-ab`), with a table of the two run
// by run. The variants take turns: run 1 of each at a step, then run 2,
// and so on (the machine's speed drifts within minutes, and runs of one
// variant in a row would show the drift as a difference). The relay runs
// on one CPU alone (--pin). `make bench-relay` runs it (about 30 minutes
// on a quiet 2-core machine);
// `make bench-relay BENCH_QUICK=1` runs --quick (about 2 minutes).
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/relay/bench/cpupin"
	"github.com/relayfleet/relayfleet/relay/bench/floor"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/procstat"
	"github.com/relayfleet/relayfleet/relay/wire"
)

type variant struct {
	name           string
	buffer         int
	frameTime      time.Duration
	framesPerGroup int
	frameSize      int
	sendBatch      int // --send-batch: 1 is one sendmsg per packet
	steps          []int
	profile        string   // CPU profile file name at --profile-at ("" none)
	flags          []string // more relay serve flags
	bin            string   // the relay binary ("": --relay)
}

// slot is one run of one variant at one step.
type slot struct{ v, step, run int }

// schedule orders every run of every variant at every step so that the
// variants take turns: run 1 of each variant at a step, then run 2, and
// so on. This machine's speed drifts by up to 10% within minutes
// (docs/benchmarks.md, session 7); runs of one variant in a row would
// measure the drift as a difference between variants.
func schedule(steps [][]int, runs int) []slot {
	var out []slot
	all := map[int]bool{}
	var order []int
	for _, ss := range steps {
		for _, n := range ss {
			if !all[n] {
				all[n] = true
				order = append(order, n)
			}
		}
	}
	for _, n := range order {
		for r := range runs {
			for v, ss := range steps {
				if i := slices.Index(ss, n); i >= 0 {
					out = append(out, slot{v, i, r})
				}
			}
		}
	}
	return out
}

// The kernel floor: one socket sending 520-byte packets to 1,000 loopback
// destinations in turn, 100 each (what a destination's default receive
// buffer holds unread).
const (
	floorDests   = 1000
	floorPackets = 100 * floorDests
	floorSize    = 520
	floorBatch   = 64
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	relayBin := fs.String("relay", "", "the relay binary to measure")
	before := fs.String("before", "", "another relay binary (the one before a change): its defaults run beside --relay's, run by run")
	quick := fs.Bool("quick", false, "short mode (about 3 minutes): 500 listeners, 4 s windows, no --groups")
	stepsFlag := fs.String("steps", "", "listener steps of the main variants (default 1000,2000; --quick 500)")
	window := fs.Duration("window", 0, "measurement window per run (default 8s; --quick 4s)")
	runs := fs.Int("runs", 3, "runs of every step (min, median and max are printed)")
	profileAt := fs.Int("profile-at", 2000, "capture CPU profiles of the relay at this step (first run of each send path); 0: none")
	profileDir := fs.String("profile-dir", "bin", "where CPU profiles go")
	only := fs.String("only", "", "run only variants whose name contains this")
	groups := fs.Bool("groups", false, "also run ~1 s groups (8 frames per group) at the top step")
	pinFlag := fs.Bool("pin", true, "run the relay on one CPU alone (as a relay@ unit: GOMAXPROCS 1) and the load on the others (Linux, 2 CPUs or more)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *relayBin == "" {
		fmt.Fprintln(stderr, "bench: --relay is required")
		return 2
	}
	if *stepsFlag == "" {
		*stepsFlag = "1000,2000"
		if *quick {
			*stepsFlag = "500"
		}
	}
	if *window == 0 {
		*window = 8 * time.Second
		if *quick {
			*window = 4 * time.Second
		}
	}
	var steps []int
	for _, s := range strings.Split(*stepsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "bench: --steps %q: want positive numbers, comma-separated\n", *stepsFlag)
			return 2
		}
		steps = append(steps, n)
	}
	if *window <= 0 {
		fmt.Fprintln(stderr, "bench: --window must be positive")
		return 2
	}
	if *runs < 1 {
		fmt.Fprintf(stderr, "bench: --runs %d: want at least 1\n", *runs)
		return 2
	}
	// The relay as deployed, and each lever turned off, at every step, so
	// that each is measured against the others in the same run.
	const frames = "120 ms frames, 1 frame per group, 16 MiB buffer"
	variants := []variant{
		{frames + ", the relay's defaults (listeners asked to acknowledge every other packet, ACKs delayed up to 200 ms or 10 ack-eliciting packets, packets written by the goroutine that made them (the track's writer, the socket's reader), one sendmsg each, probe timeouts waiting for reads)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d.pprof", nil, ""},
		{frames + ", listeners acknowledging each packet (--listener-ack-delay 0: the relay asks nothing, as of listeners whose QUIC lacks the ACK frequency extension)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-ackfreq.pprof", []string{"--listener-ack-delay", "0"}, ""},
		{frames + ", sendmmsg batches across connections (--send-batch 64)", 16 << 20, 120 * time.Millisecond, 1, 600, 64, steps, "relay-cpu-%d-batch.pprof", nil, ""},
		{frames + ", quic-go's ACK delay (--ack-delay 25ms)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-ack25.pprof", []string{"--ack-delay", "25ms"}, ""},
		{frames + ", quic-go's send queue (--send-queue)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-queue.pprof", []string{"--send-queue"}, ""},
		{frames + ", quic-go's probe timeouts (--pto-waits-for-reads=false)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-pto.pprof", []string{"--pto-waits-for-reads=false"}, ""},
		{frames + ", quic-go's ACK threshold (--ack-threshold 2)", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-ackthr.pprof", []string{"--ack-threshold", "2"}, ""},
	}
	if *before != "" {
		if st, err := os.Stat(*before); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			fmt.Fprintf(stderr, "bench: --before %s: not an executable relay binary\n", *before)
			return 2
		}
		variants = slices.Insert(variants, 1, variant{frames + ", the relay before (--before " + *before + "), its defaults", 16 << 20, 120 * time.Millisecond, 1, 600, 1, steps, "relay-cpu-%d-before.pprof", nil, *before})
	}
	if *groups {
		variants = append(variants,
			variant{"120 ms frames, 8 frames per group (0.96 s groups), 16 MiB buffer, the relay's defaults", 16 << 20, 120 * time.Millisecond, 8, 600, 64, steps[len(steps)-1:], "", nil, ""})
	}
	if *only != "" {
		variants = slices.DeleteFunc(variants, func(v variant) bool { return !strings.Contains(v.name, *only) })
	}
	fmt.Fprintf(stdout, "Machine: %s; %s; %s.\n\nDate: %s. Load average at the start: %s. Window %v per run, %d runs per step.\n\n",
		machine(), kernel(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 MST"), loadAvg(), *window, *runs)

	var pins *cpupin.Pinning
	if *pinFlag {
		var err error
		if pins, err = cpupin.Pin(); err != nil {
			fmt.Fprintf(stderr, "bench: --pin: %v\n", err)
			return 1
		}
	}
	if pins != nil {
		fmt.Fprintf(stdout, "CPUs: %s.\n\n", pins.Desc)
	} else {
		fmt.Fprintf(stdout, "CPUs: the relay and the load share all %d (not pinned).\n\n", runtime.NumCPU())
	}

	fl, err := kernelFloor(ctx, *runs, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: kernel floor: %v\n", err)
		return 1
	}
	// Every run first, the variants taking turns; then the tables, one
	// variant after another.
	stepsOf := make([][]int, len(variants))
	results := make([][][]result, len(variants))
	for i, v := range variants {
		stepsOf[i] = v.steps
		results[i] = make([][]result, len(v.steps))
	}
	for _, sl := range schedule(stepsOf, *runs) {
		if ctx.Err() != nil {
			break // print what was measured
		}
		v, n := variants[sl.v], variants[sl.v].steps[sl.step]
		prof := ""
		if sl.run == 0 && n == *profileAt && v.profile != "" {
			prof = filepath.Join(*profileDir, fmt.Sprintf(v.profile, n))
		}
		bin := cmp.Or(v.bin, *relayBin)
		r, err := step(ctx, pins, bin, v, n, *window, prof, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %s, %d listeners, run %d: %v\n", v.name, n, sl.run+1, err)
			r = result{n: n, err: oneLine(err)}
		}
		results[sl.v][sl.step] = append(results[sl.v][sl.step], r)
	}
	for i, v := range variants {
		var all [][]result
		for _, rs := range results[i] {
			if len(rs) > 0 {
				all = append(all, rs)
			}
		}
		fmt.Fprintf(stdout, "### %s\n\n", v.name)
		printSummary(stdout, all, fl)
		printRuns(stdout, all)
		printMemory(stdout, all)
	}
	if *before != "" && len(variants) > 1 && variants[1].bin == *before && variants[0].bin == "" {
		printPairs(stdout, results[0], results[1])
	}
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

// printPairs compares --relay's defaults with --before's run by run: each
// pair ran one after the other.
func printPairs(w io.Writer, after, before [][]result) {
	printHead(w, "### --relay against --before, run by run (each pair ran in turn)",
		"| listeners | run | listeners per core: before | after | after / before | RSS per listener (KiB): before | after | frame latency p50 / max (ms): before | after |",
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for s := range min(len(after), len(before)) {
		for i := range min(len(after[s]), len(before[s])) {
			a, b := after[s][i], before[s][i]
			if a.err != "" || b.err != "" || b.perCore == 0 {
				fmt.Fprintf(w, "| %d | %d | - | - | - | - | - | - | - |\n", a.n, i+1)
				continue
			}
			fmt.Fprintf(w, "| %d | %d | %.0f | %.0f | %+.1f%% | %.1f | %.1f | %.1f / %.0f | %.1f / %.0f |\n", a.n, i+1, b.perCore, a.perCore, (a.perCore/b.perCore-1)*100, b.rssPerListenerKiB, a.rssPerListenerKiB,
				b.latP50, b.latMax, a.latP50, a.latMax)
		}
	}
	fmt.Fprintln(w)
}

// floorResult is the kernel's CPU time per packet, in microseconds, over
// the runs: one sendmsg each, and sendmmsg batches.
type floorResult struct{ sendmsg, sendmmsg []float64 }

func kernelFloor(ctx context.Context, runs int, stdout, logw io.Writer) (floorResult, error) {
	var fr floorResult
	for range runs {
		if ctx.Err() != nil {
			return fr, ctx.Err()
		}
		r, err := floor.Measure(floor.Options{Destinations: floorDests, Packets: floorPackets, Size: floorSize, Batch: floorBatch})
		if err != nil {
			return fr, err
		}
		if r.DeliveredSendmsg != floorPackets || r.DeliveredSendmmsg != floorPackets {
			fmt.Fprintf(logw, "bench: kernel floor: %d and %d of %d packets arrived\n", r.DeliveredSendmsg, r.DeliveredSendmmsg, floorPackets)
		}
		fr.sendmsg = append(fr.sendmsg, us(r.Sendmsg))
		fr.sendmmsg = append(fr.sendmmsg, us(r.Sendmmsg))
	}
	fmt.Fprintf(stdout, "### Kernel floor\n\nCPU time (user + system, getrusage of the sending thread) per %d-byte UDP packet from one socket to %d loopback destinations in turn, %d packets per run, %d runs:\n\n", floorSize, floorDests, floorPackets, runs)
	fmt.Fprintln(stdout, "| system call | CPU per packet (us): min | median | max | packets per core-second (median) |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|")
	for _, row := range []struct {
		name string
		v    []float64
	}{{"sendmsg, one packet each", fr.sendmsg}, {fmt.Sprintf("sendmmsg, batches of %d", floorBatch), fr.sendmmsg}} {
		lo, md, hi := stats3(row.v)
		fmt.Fprintf(stdout, "| %s | %.2f | %.2f | %.2f | %.0f |\n", row.name, lo, md, hi, 1e6/md)
	}
	fmt.Fprintln(stdout)
	return fr, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// stats3 is the minimum, median (the upper one of an even count) and
// maximum of v.
func stats3(v []float64) (lo, md, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[0], s[len(s)/2], s[len(s)-1]
}

func printSummary(w io.Writer, all [][]result, fl floorResult) {
	_, msg, _ := stats3(fl.sendmsg)
	_, mmsg, _ := stats3(fl.sendmmsg)
	fmt.Fprintln(w, "| listeners | runs ok | listeners per core: min / median / max | relay CPU per packet sent (us): min / median / max | x sendmsg floor (medians) | x sendmmsg floor (medians) | x sendmsg floor measured before each run: min / median / max | x sendmmsg floor, each run: min / median / max | packets per system call (median) | RSS per listener (KiB): min / median / max | frames lost (max) | RcvbufErrors (max) | late >1 s (max) |")
	fmt.Fprintln(w, "|---:|---:|---|---|---:|---:|---|---|---:|---|---:|---:|---:|")
	for _, rs := range all {
		var perCore, perPkt, perCall, rss, xMsg, xMmsg []float64
		var lost, rcvErr, late int64
		for _, r := range rs {
			if r.err != "" {
				continue
			}
			perCore = append(perCore, r.perCore)
			perPkt = append(perPkt, r.usPerPacket)
			perCall = append(perCall, r.perCall)
			if r.floorMsg > 0 && r.floorMmsg > 0 {
				xMsg, xMmsg = append(xMsg, r.usPerPacket/r.floorMsg), append(xMmsg, r.usPerPacket/r.floorMmsg)
			}
			rss = append(rss, r.rssPerListenerKiB)
			lost, rcvErr, late = max(lost, r.framesLost), max(rcvErr, r.rcvbufErrs), max(late, r.late)
		}
		if len(perCore) == 0 {
			fmt.Fprintf(w, "| %d | 0 of %d | - | - | - | - | - | - | - | - | - |\n", rs[0].n, len(rs))
			continue
		}
		c0, c1, c2 := stats3(perCore)
		p0, p1, p2 := stats3(perPkt)
		_, b1, _ := stats3(perCall)
		m0, m1, m2 := stats3(rss)
		x0, x1, x2 := stats3(xMsg)
		y0, y1, y2 := stats3(xMmsg)
		fmt.Fprintf(w, "| %d | %d of %d | %.0f / %.0f / %.0f | %.2f / %.2f / %.2f | %.1f | %.1f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.1f | %.1f / %.1f / %.1f | %d | %d | %d |\n",
			rs[0].n, len(perCore), len(rs), c0, c1, c2, p0, p1, p2, p1/msg, p1/mmsg, x0, x1, x2, y0, y1, y2, b1, m0, m1, m2, lost, rcvErr, late)
	}
	fmt.Fprintln(w)
}

// printHead starts a Markdown table: a title line, a blank line, the
// header row and the row that aligns the columns.
func printHead(w io.Writer, title, header, align string) {
	fmt.Fprintln(w, title)
	fmt.Fprintln(w)
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, align)
}

func printRuns(w io.Writer, all [][]result) {
	printHead(w, "Every run:",
		"| listeners | run | connected | relay CPU (% of a core) | listeners per core | packets sent | system calls | CPU per packet (us) | RSS growth (MiB) | RSS per listener (KiB) | RcvbufErrors | SndbufErrors | bitrate per listener (kbit/s) | frames received | frames lost | late (>1 s) | frame latency p50 / max (ms) | UDP buffer granted (B) | load average (1 min) | floor before the run, sendmsg / sendmmsg (us) |",
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, rs := range all {
		for i, r := range rs {
			if r.err != "" {
				fmt.Fprintf(w, "| %d | %d | error: %s |\n", r.n, i+1, r.err)
				continue
			}
			fmt.Fprintf(w, "| %d | %d | %d | %.1f | %.0f | %d | %d | %.2f | %.1f | %.1f | %d | %d | %.1f | %d | %d | %d | %.1f / %.0f | %d | %.2f | %.2f / %.2f |\n",
				r.n, i+1, r.connected, r.coreShare, r.perCore, r.packets, r.calls, r.usPerPacket, r.rssGrowthMiB, r.rssPerListenerKiB,
				r.rcvbufErrs, r.sndbufErrs, r.bitrate, r.framesRecv, r.framesLost, r.late, r.latP50, r.latMax, r.granted, r.load1, r.floorMsg, r.floorMmsg)
		}
	}
	fmt.Fprintln(w)
}

// result is one run of one step.
type result struct {
	n, connected                 int
	coreShare, perCore           float64
	usPerPacket, perCall         float64
	packets, calls               int64
	rssGrowthMiB                 float64
	rssPerListenerKiB            float64
	rcvbufErrs, sndbufErrs       int64
	bitrate                      float64
	framesRecv, framesLost, late int64
	latP50, latMax               float64 // frame latency at the listeners (ms): sent to received
	granted                      int
	load1                        float64
	floorMsg, floorMmsg          float64 // the kernel floor just before the run (us per packet)
	err                          string
	mem                          memPerListener // mem.go
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "|", "/") }

var addrRE = regexp.MustCompile(`msg="relay listening" addr=(\S+)`)

// step runs one relay process with n listeners and measures it.
func step(ctx context.Context, pins *cpupin.Pinning, bin string, v variant, n int, window time.Duration, profile string, logw io.Writer) (result, error) {
	// Bounded: connecting the listeners may take long on a saturated machine.
	ctx, cancel := context.WithTimeout(ctx, window+3*time.Minute)
	defer cancel()
	// The floor again, just before this run: the machine's load drifts
	// between runs, the multiple of this floor less.
	fl, err := floor.Measure(floor.Options{Destinations: floorDests, Packets: floorPackets / 5, Size: floorSize, Batch: floorBatch})
	if err != nil {
		return result{}, fmt.Errorf("kernel floor: %w", err)
	}
	began := time.Now()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--max-sessions-per-address", "0", "--udp-buffer", strconv.Itoa(v.buffer), "--send-batch", strconv.Itoa(v.sendBatch), "--pprof", "--log-level", "info"}
	cmd := exec.Command(bin, append(args, v.flags...)...)
	cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=1")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	if err := pins.Start(cmd); err != nil {
		return result{}, fmt.Errorf("start relay: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sent := false
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addrCh <- m[1]
				sent = true
			}
			if strings.Contains(sc.Text(), "level=ERROR") {
				fmt.Fprintln(logw, "relay:", sc.Text())
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(10 * time.Second):
		return result{}, errors.New("relay did not start")
	}
	base := "http://" + addr
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pubErr := make(chan error, 1)
	go func() {
		pubErr <- loadgen.Publish(ctx, base+"/", loadgen.PublishOptions{
			Broadcast: "bench", FrameTime: v.frameTime, FramesPerGroup: v.framesPerGroup, FrameSize: v.frameSize, Logger: logger,
		})
	}()
	var st wire.Stats
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := getJSON(ctx, base+"/stats", &st); err == nil && st.Broadcasts == 1 {
			break
		}
		if time.Now().After(deadline) {
			return result{}, errors.New("publisher did not announce")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	pid := cmd.Process.Pid
	m0, err := procstat.Read("/proc", pid)
	if err != nil {
		return result{}, err
	}
	rss0 := m0.RSS
	mem0, err := relayMem(ctx, base)
	if err != nil {
		return result{}, err
	}
	var mem1 memStats
	var (
		cpu0, cpu1   float64
		snmp0, snmp1 map[string]int64
		st0          wire.Stats
		t0, t1       time.Time
		rss1         int64
		profDone     = make(chan error, 1)
	)
	rep, err := loadgen.Run(ctx, loadgen.Options{
		URL: base + "/", Broadcast: "bench", Listeners: n, Duration: window, Parallel: 32, Logger: logger,
		Window: func(start bool) {
			if start {
				_ = getJSON(ctx, base+"/stats", &st0)
				t0 = time.Now()
				cpu0, snmp0 = measure(pid)
				if profile != "" {
					go func() { profDone <- fetchProfile(ctx, base, profile, window-2*time.Second) }()
				}
				return
			}
			var m procstat.Sample
			t1, m = time.Now(), read(pid)
			cpu1, snmp1, rss1 = m.CPU.Seconds(), m.UDP, m.RSS
			mem1, _ = relayMem(ctx, base)
			if profile != "" { // the heap beside the CPU profile
				heap := filepath.Join(filepath.Dir(profile), strings.Replace(filepath.Base(profile), "cpu", "heap", 1))
				if err := fetchHeapProfile(ctx, base, heap); err != nil {
					fmt.Fprintf(logw, "bench: heap profile: %v\n", err)
				}
			}
			_ = getJSON(ctx, base+"/stats", &st)
		},
	})
	if err != nil {
		return result{}, err
	}
	timedOut := ctx.Err() != nil
	if profile != "" {
		if err := <-profDone; err != nil {
			fmt.Fprintf(logw, "bench: profile: %v\n", err)
		} else {
			fmt.Fprintf(logw, "bench: CPU profile of the relay at %d listeners: %s\n", n, profile)
		}
	}
	cancel()
	<-pubErr
	if t1.IsZero() || timedOut {
		return result{}, fmt.Errorf("%d of %d listeners connected before the step's time limit (%v)", rep.Connected, n, window+3*time.Minute)
	}
	fmt.Fprintf(logw, "bench: %s, %d listeners: connected in %.1f s, step took %.1f s\n",
		v.name, n, t0.Sub(began).Seconds(), time.Since(began).Seconds())
	if rep.FramesLost > 0 || rep.Ended > 0 || rep.Failed > 0 || rep.SilentAtEnd > 0 {
		// what a loss was: the relay's drops against the listeners' view
		fmt.Fprintf(logw, "bench: %d listeners: %d frames lost, %d groups missing, %d listeners ended early, %d failed, %d silent at the end; the relay dropped %d groups in the window\n",
			n, rep.FramesLost, rep.GroupsMissing, rep.Ended, rep.Failed, rep.SilentAtEnd, st.GroupsDropped-st0.GroupsDropped)
	}
	secs := t1.Sub(t0).Seconds()
	coreShare := (cpu1 - cpu0) / secs * 100
	live := max(rep.Connected-rep.Frozen, 1)
	perListener := coreShare / float64(live)
	r := result{n: n, connected: rep.Connected, coreShare: coreShare, load1: load1(), floorMsg: us(fl.Sendmsg), floorMmsg: us(fl.Sendmmsg)}
	if perListener > 0 {
		r.perCore = 100 / perListener
	}
	r.packets, r.calls = st.UDPPacketsSent-st0.UDPPacketsSent, st.UDPSendCalls-st0.UDPSendCalls
	if r.packets > 0 {
		r.usPerPacket = (cpu1 - cpu0) * 1e6 / float64(r.packets)
	}
	if r.calls > 0 {
		r.perCall = float64(r.packets) / float64(r.calls)
	}
	growth := float64(rss1 - rss0)
	r.rssGrowthMiB, r.rssPerListenerKiB = growth/(1<<20), growth/1024/float64(live)
	r.mem = memPer(mem0, mem1, live)
	r.rcvbufErrs, r.sndbufErrs = snmp1["RcvbufErrors"]-snmp0["RcvbufErrors"], snmp1["SndbufErrors"]-snmp0["SndbufErrors"]
	r.bitrate, r.framesRecv, r.framesLost, r.late = rep.BitrateBpsMean/1000, rep.FramesReceived, rep.FramesLost, rep.LateFrames
	r.latP50, r.latMax = rep.LatencyMsP50, rep.LatencyMsMax
	r.granted = st.UDPReceiveBuffer / 2
	return r, nil
}

func getJSON(ctx context.Context, url string, v any) error {
	resp, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// get sends a GET to url; any status but 200 OK is an error. The caller
// closes the body.
func get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp, nil
}

func fetchProfile(ctx context.Context, base, path string, d time.Duration) error {
	return fetchTo(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, max(int(d.Seconds()), 1)), path)
}

// read measures the relay process (package relay/procstat); a failed
// read is a zero sample.
func read(pid int) procstat.Sample {
	m, _ := procstat.Read("/proc", pid)
	return m
}

// measure is the process's CPU time in seconds and its namespace's UDP
// counters.
func measure(pid int) (float64, map[string]int64) {
	m := read(pid)
	return m.CPU.Seconds(), m.UDP
}

func machine() string {
	b, err := exec.Command("lscpu").Output()
	if err != nil {
		return "unknown CPU"
	}
	var model, cpus string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Model name":
			model = strings.TrimSpace(v)
		case "CPU(s)":
			cpus = strings.TrimSpace(v)
		}
	}
	return fmt.Sprintf("%s, %s CPUs", model, cpus)
}

// loadAvg is /proc/loadavg's three load averages and the CPU count.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%s, %s, %s (1, 5, 15 min) on %d CPUs", f[0], f[1], f[2], runtime.NumCPU())
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func kernel() string {
	b, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown kernel"
	}
	return strings.TrimSpace(string(b))
}
