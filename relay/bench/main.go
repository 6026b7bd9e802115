// Command bench measures a relay process under listener load on one
// machine, over loopback: for each variant and listener step it starts a
// fresh relay process (the binary given with --relay), a publisher of
// paced frames and the load generator (both in this process), and prints
// a markdown row per step: the relay process's own CPU time (from
// /proc/PID/stat) as a percentage of one core per listener, its RSS growth
// per listener (/proc/PID/status VmRSS, minus the RSS before the listeners
// came), the machine-wide UDP RcvbufErrors and SndbufErrors deltas
// (/proc/net/snmp; the load generator's sockets count too), and the load
// generator's mean bitrate per listener and frames lost. CPU, RSS and the
// UDP counters are taken over the measurement window only, after every
// listener has connected. `make bench-relay` runs it.
package main

import (
	"bufio"
	"bytes"
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/relay/loadgen"
)

type variant struct {
	name           string
	buffer         int
	frameTime      time.Duration
	framesPerGroup int
	frameSize      int
	steps          []int
}

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
	stepsFlag := fs.String("steps", "250,500,1000,2000,4000", "listener steps of the main variants")
	window := fs.Duration("window", 8*time.Second, "measurement window per step")
	profileAt := fs.Int("profile-at", 2000, "capture a CPU profile of the relay at this step of the first variant; 0: none")
	profileDir := fs.String("profile-dir", "bin", "where CPU profiles go")
	only := fs.String("only", "", "run only variants whose name contains this")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *relayBin == "" {
		fmt.Fprintln(stderr, "bench: --relay is required")
		return 2
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
	between := func(lo, hi int) []int {
		var out []int
		for _, s := range steps {
			if s >= lo && s <= hi {
				out = append(out, s)
			}
		}
		return out
	}
	// The main variant runs every step; the others the steps where their
	// difference shows, to keep the whole run near ten minutes.
	variants := []variant{
		{"120 ms frames, 1 frame per group, 16 MiB buffer", 16 << 20, 120 * time.Millisecond, 1, 600, steps},
		{"120 ms frames, 1 frame per group, kernel default buffer (212992 B)", 212992, 120 * time.Millisecond, 1, 600, between(1000, 1<<30)},
		{"120 ms frames, 8 frames per group (0.96 s groups), 16 MiB buffer", 16 << 20, 120 * time.Millisecond, 8, 600, between(1000, 2000)},
		{"20 ms frames, 1 frame per group, 16 MiB buffer", 16 << 20, 20 * time.Millisecond, 1, 100, between(0, 1000)},
		{"20 ms frames, 50 frames per group (1 s groups), 16 MiB buffer", 16 << 20, 20 * time.Millisecond, 50, 100, between(0, 1000)},
	}
	fmt.Fprintf(stdout, "Machine: %s; %s\n\nDate: %s. Window %v per step.\n\n", machine(), kernel(), time.Now().UTC().Format("2006-01-02 15:04 MST"), *window)
	for vi, v := range variants {
		if *only != "" && !strings.Contains(v.name, *only) {
			continue
		}
		fmt.Fprintf(stdout, "### %s\n\n", v.name)
		fmt.Fprintln(stdout, "| listeners | connected | relay CPU (% of a core) | % core per listener | listeners per core | RSS growth (MiB) | RSS per listener (KiB) | RcvbufErrors | SndbufErrors | bitrate per listener (kbit/s) | frames received | frames lost | late (>1 s) | UDP buffer granted (B) |")
		fmt.Fprintln(stdout, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, n := range v.steps {
			if ctx.Err() != nil {
				return 1
			}
			prof := ""
			if vi == 0 && n == *profileAt {
				prof = filepath.Join(*profileDir, fmt.Sprintf("relay-cpu-%d.pprof", n))
			}
			row, err := step(ctx, *relayBin, v, n, *window, prof, stderr)
			if err != nil {
				fmt.Fprintf(stderr, "bench: %s, %d listeners: %v\n", v.name, n, err)
				fmt.Fprintf(stdout, "| %d | error: %s |\n", n, oneLine(err))
				continue
			}
			fmt.Fprintln(stdout, row)
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "|", "/") }

var addrRE = regexp.MustCompile(`msg="relay listening" addr=(\S+)`)

// step runs one relay process with n listeners and returns a table row.
func step(ctx context.Context, bin string, v variant, n int, window time.Duration, profile string, logw io.Writer) (string, error) {
	// Bounded: connecting the listeners may take long on a saturated machine.
	ctx, cancel := context.WithTimeout(ctx, window+3*time.Minute)
	defer cancel()
	began := time.Now()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--udp-buffer", strconv.Itoa(v.buffer), "--pprof", "--log-level", "info")
	cmd.Env = append(os.Environ(), "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=1")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start relay: %w", err)
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
		return "", errors.New("relay did not start")
	}
	base := "http://" + addr
	logger := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pubErr := make(chan error, 1)
	go func() {
		pubErr <- loadgen.Publish(ctx, base+"/", loadgen.PublishOptions{
			Broadcast: "bench", FrameTime: v.frameTime, FramesPerGroup: v.framesPerGroup, FrameSize: v.frameSize, Logger: logger,
		})
	}()
	var st stats
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := getJSON(ctx, base+"/stats", &st); err == nil && st.Broadcasts == 1 {
			break
		}
		if time.Now().After(deadline) {
			return "", errors.New("publisher did not announce")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	pid := cmd.Process.Pid
	rss0, err := rssBytes(pid)
	if err != nil {
		return "", err
	}
	var (
		cpu0, cpu1   float64
		snmp0, snmp1 map[string]int64
		t0, t1       time.Time
		rss1         int64
		profDone     = make(chan error, 1)
	)
	rep, err := loadgen.Run(ctx, loadgen.Options{
		URL: base + "/", Broadcast: "bench", Listeners: n, Duration: window, Parallel: 32, Logger: logger,
		Window: func(start bool) {
			if start {
				t0, cpu0, snmp0 = time.Now(), cpuSeconds(pid), udpCounters()
				if profile != "" {
					go func() { profDone <- fetchProfile(ctx, base, profile, window-2*time.Second) }()
				}
				return
			}
			t1, cpu1, snmp1 = time.Now(), cpuSeconds(pid), udpCounters()
			rss1, _ = rssBytes(pid)
			_ = getJSON(ctx, base+"/stats", &st)
		},
	})
	if err != nil {
		return "", err
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
		return "", fmt.Errorf("%d of %d listeners connected before the step's time limit (%v)", rep.Connected, n, window+3*time.Minute)
	}
	fmt.Fprintf(logw, "bench: %s, %d listeners: connected in %.1f s, step took %.1f s\n",
		v.name, n, t0.Sub(began).Seconds(), time.Since(began).Seconds())
	secs := t1.Sub(t0).Seconds()
	coreShare := (cpu1 - cpu0) / secs * 100
	live := max(rep.Connected-rep.Frozen, 1)
	perListener := coreShare / float64(live)
	perCore := 0.0
	if perListener > 0 {
		perCore = 100 / perListener
	}
	growth := float64(rss1 - rss0)
	return fmt.Sprintf("| %d | %d | %.1f | %.4f | %.0f | %.1f | %.1f | %d | %d | %.1f | %d | %d | %d | %d |",
		n, rep.Connected, coreShare, perListener, perCore, growth/(1<<20), growth/1024/float64(live),
		snmp1["RcvbufErrors"]-snmp0["RcvbufErrors"], snmp1["SndbufErrors"]-snmp0["SndbufErrors"],
		rep.BitrateBpsMean/1000, rep.FramesReceived, rep.FramesLost, rep.LateFrames, st.UDPReceiveBuffer/2), nil
}

type stats struct {
	Broadcasts       int `json:"broadcasts"`
	Sessions         int `json:"sessions"`
	UDPReceiveBuffer int `json:"udp_receive_buffer"`
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func fetchProfile(ctx context.Context, base, path string, d time.Duration) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, max(int(d.Seconds()), 1)), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuSeconds is the process's user plus system CPU time (/proc/PID/stat
// fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(ut+st) / 100
}

func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// udpCounters reads the Udp: lines of /proc/net/snmp.
func udpCounters() map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return out
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Udp: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil {
			names = f
			continue
		}
		for i, v := range f {
			if i < len(names) {
				out[names[i]], _ = strconv.ParseInt(v, 10, 64)
			}
		}
		break
	}
	return out
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

func kernel() string {
	b, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown kernel"
	}
	return strings.TrimSpace(string(b))
}
