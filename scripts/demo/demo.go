package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// The demo's own lab, apart from the default one and the tests'.
const (
	labDir    = "/var/lib/relayfleet/lab-demo"
	labBridge = "rfdemo0"
	labSubnet = "10.231.87.0/24"
	broadcast = "live/demo"
)

type demo struct {
	out                       io.Writer
	work, bin, pulumi, images string
	listeners, eventListeners int
	started                   time.Time

	mu           sync.Mutex
	procs        []*bg
	steps        []stepTime
	marks        []mark
	samples      []sample
	stopSampling func()
	routerURL    string
	originList   []string // the origin boxes' URLs with their pins (refreshRelays)
	loads        map[string]*loadReport
	rolledOut    bool
	eventUp      bool
	relayList    []wire.Relay // refreshRelays
	stopping     atomic.Bool  // cleanup began: the stream is not started again
}

type stepTime struct {
	Name    string
	Seconds float64
}

type mark struct {
	At    time.Duration
	Label string
}

// bg is a background process the demo started; cleanup stops it.
type bg struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func (d *demo) path(parts ...string) string {
	return filepath.Join(append([]string{d.work}, parts...)...)
}
func (d *demo) fleetBin() string     { return filepath.Join(d.bin, "fleet") }
func (d *demo) relayBin() string     { return filepath.Join(d.bin, "relay") }
func (d *demo) since() time.Duration { return time.Since(d.started) }

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) mark(label string) {
	d.mu.Lock()
	d.marks = append(d.marks, mark{At: d.since(), Label: label})
	d.mu.Unlock()
}

// step runs one numbered step and times it.
func (d *demo) step(ctx context.Context, n, of int, title string, f func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.say("\n==> [%d/%d] %s  (t+%s)", n, of, title, d.since().Round(time.Second))
	start := time.Now()
	err := f()
	d.steps = append(d.steps, stepTime{title, time.Since(start).Seconds()})
	if err != nil {
		return fmt.Errorf("step %d (%s): %w", n, title, err)
	}
	d.say("    done in %.1fs", time.Since(start).Seconds())
	return nil
}

// stackArgs are the flags every stack command of the demo takes.
func (d *demo) stackArgs() []string {
	return []string{"--state-dir", d.path("state"), "--pulumi", d.pulumi, "--relay-binary", d.relayBin(),
		"--lab-dir", labDir, "--lab-images", d.images, "--lab-bridge", labBridge, "--lab-subnet", labSubnet}
}

// keyArgs are the flags the fleet's key commands take (token, auth).
func (d *demo) keyArgs() []string {
	return []string{"--state-dir", d.path("state"), "--pulumi", d.pulumi}
}

// token mints a token with fleet token; the command is printed, the token
// is neither printed nor logged.
func (d *demo) token(ctx context.Context, args ...string) (string, error) {
	args = append(append([]string{"token", "--inventory", d.path("demo.yaml")}, args...), d.keyArgs()...)
	d.say("    $ fleet %s", strings.Join(shortArgs(args), " "))
	cmd := exec.CommandContext(ctx, d.fleetBin(), args...)
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fleet token: %v: %s", err, lastLine(errb.String()))
	}
	d.say("      (a token; not shown)")
	return strings.TrimSpace(string(out)), nil
}

var jwtRE = regexp.MustCompile(`jwt=[^&\s]+`)

// redact hides tokens in URLs (?jwt=) from what the demo prints and logs.
func redact(s string) string { return jwtRE.ReplaceAllString(s, "jwt=[token]") }

// sh runs a command to completion, printing it and its output (indented,
// at most tail lines; all of it goes to the step's log file).
func (d *demo) sh(ctx context.Context, tail int, name string, args ...string) (string, error) {
	shown := filepath.Base(name) + " " + strings.Join(shortArgs(args), " ")
	d.say("    $ %s", shown)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out := buf.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if tail > 0 && len(lines) > tail {
		d.say("      ... (%d lines in %s)", len(lines)-tail, d.path("logs"))
		lines = lines[len(lines)-tail:]
	}
	if tail != 0 {
		for _, l := range lines {
			d.say("      %s", l)
		}
	}
	f, _ := os.OpenFile(d.path("logs", "commands.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if f != nil {
		fmt.Fprintf(f, "$ %s %s\n%s\n", name, redact(strings.Join(args, " ")), out)
		f.Close()
	}
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", shown, err, lastLine(out))
	}
	return out, nil
}

// fleetJSON runs a fleet command that prints JSON and decodes its stdout
// into v. It shows the command; stdout and stderr go to commands.log.
func (d *demo) fleetJSON(ctx context.Context, v any, args ...string) error {
	shown := "fleet " + strings.Join(shortArgs(args), " ")
	d.say("    $ %s", shown)
	return d.runJSON(ctx, shown, v, args...)
}

// runJSON runs fleet args quietly and decodes its stdout into v.
func (d *demo) runJSON(ctx context.Context, shown string, v any, args ...string) error {
	cmd := exec.CommandContext(ctx, d.fleetBin(), args...)
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if f, _ := os.OpenFile(d.path("logs", "commands.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); f != nil {
		fmt.Fprintf(f, "$ %s %s\n%s%s\n", d.fleetBin(), redact(strings.Join(args, " ")), out.String(), errb.String())
		f.Close()
	}
	// A command that failed may still have printed its JSON (reconcile
	// does, with the failed event's error in it).
	if jerr := json.Unmarshal(out.Bytes(), v); jerr != nil {
		if err != nil {
			return fmt.Errorf("%s: %v: %s", shown, err, lastLine(errb.String()))
		}
		return fmt.Errorf("%s: its JSON: %v", shown, jerr)
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", shown, err, lastLine(errb.String()))
	}
	return nil
}

// eventOutcome is the part of fleet events reconcile --json the demo
// reads: each event's phase, and the actions the run took.
type eventOutcome struct {
	Event   string `json:"event"`
	Phase   string `json:"phase"`
	Error   string `json:"error"`
	Actions []struct {
		Action string `json:"action"`
		Detail string `json:"detail"`
	} `json:"actions"`
}

// phaseOf is event's phase in a reconcile's outcomes, "" when absent.
func phaseOf(outs []eventOutcome, event string) string {
	for _, o := range outs {
		if o.Event == event {
			return o.Phase
		}
	}
	return ""
}

// labBox is the part of fleet lab status --json the demo reads.
type labBox struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	State   string `json:"state"`
	Cores   int    `json:"cores"`
	RAM     int64  `json:"ram"`
}

// labBoxes lists the demo lab's boxes (fleet lab status --json).
func (d *demo) labBoxes(ctx context.Context) ([]labBox, error) {
	var boxes []labBox
	err := d.runJSON(ctx, "fleet lab status", &boxes, "lab", "status", "--dir", labDir, "--json")
	return boxes, err
}

// shortArgs hides the long flags every command repeats.
func shortArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--state-dir", "--pulumi", "--relay-binary", "--lab-dir", "--lab-images", "--lab-bridge", "--lab-subnet":
			i++
			continue
		}
		out = append(out, redact(args[i]))
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// start runs a command in the background in its own process group.
func (d *demo) start(name string, stdin io.Reader, prog string, args ...string) (*bg, error) {
	log := d.path("logs", name+".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	d.say("    $ %s %s &", filepath.Base(prog), strings.Join(shortArgs(args), " "))
	cmd := exec.Command(prog, args...)
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b := &bg{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { cmd.Wait(); f.Close(); close(b.done) }()
	d.mu.Lock()
	d.procs = append(d.procs, b)
	d.mu.Unlock()
	return b, nil
}

// stop ends a background process: SIGINT, then SIGKILL to its group.
func (b *bg) stop(grace time.Duration) {
	select {
	case <-b.done:
		return
	default:
	}
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(grace):
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.done
	}
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s", url, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// fleetHosts is the part of fleet hosts --json the demo reads: every
// host of the fleet's stacks (steady and events') with its relay ports.
type fleetHosts struct {
	Hosts []struct {
		Name    string `json:"name"`
		Stack   string `json:"stack"`
		Event   string `json:"event"`
		Address string `json:"address"`
		Ports   []int  `json:"ports"`
		Tier    string `json:"tier"`
		SPKI    string `json:"spki_sha256"`
	} `json:"hosts"`
}

// origins are the fleet's origin boxes' relay URLs, pinned to the keys
// the stack reports (program.OriginURL), in the order the edges have them.
func (h *fleetHosts) origins() []string {
	var es []program.HostEntry
	for _, host := range h.Hosts {
		if host.Tier == "origin" {
			es = append(es, program.HostEntry{Name: host.Name, Address: host.Address, Ports: host.Ports, SPKI: host.SPKI, Tier: "origin"})
		}
	}
	return program.OriginURLs(es)
}

// relays are the relay processes the edges run, as the relays file fleet
// writes for the router lists them: http://ADDRESS:PORT/ and its /stats.
// The origins are left out, as there.
func (h *fleetHosts) relays() []wire.Relay {
	var rs []wire.Relay
	for _, host := range h.Hosts {
		if host.Tier == "origin" {
			continue
		}
		for _, p := range host.Ports {
			base := "http://" + net.JoinHostPort(host.Address, strconv.Itoa(p)) + "/"
			rs = append(rs, wire.Relay{URL: base, Stats: base + "stats"})
		}
	}
	return rs
}

// hosts lists the fleet's hosts (fleet hosts --json, quietly: the sampler
// and cleanup ask too).
func (d *demo) hosts(ctx context.Context) (*fleetHosts, error) {
	var h fleetHosts
	err := d.runJSON(ctx, "fleet hosts", &h, append([]string{"hosts", "--json", "--inventory", d.path("demo.yaml")}, d.keyArgs()...)...)
	return &h, err
}

// refreshRelays reads the relay processes from fleet hosts --json again:
// after fleet up and after each reconcile, which bring boxes and take
// them away.
func (d *demo) refreshRelays(ctx context.Context) error {
	h, err := d.hosts(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.relayList, d.originList = h.relays(), h.origins()
	d.mu.Unlock()
	return nil
}

// origins are the fleet's origin URLs as the last refreshRelays read them.
func (d *demo) origins() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.originList)
}

// relays are the fleet's relay processes as the last refreshRelays read
// them.
func (d *demo) relays() []wire.Relay {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.relayList)
}

// loadReport is relay loadgen --json's report, with what the demo
// does with it.
type loadReport struct{ loadgen.Report }

// readLoad parses the JSON report a finished relay loadgen left in its log.
func readLoad(b *bg) (*loadReport, error) {
	data, err := os.ReadFile(b.log)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndex(data, []byte("\n{"))
	if i < 0 {
		i = bytes.Index(data, []byte("{"))
		if i < 0 {
			return nil, fmt.Errorf("%s: no report in %s", b.name, b.log)
		}
	}
	var r loadReport
	if err := json.Unmarshal(bytes.TrimSpace(data[i:]), &r); err != nil {
		return nil, fmt.Errorf("%s: report: %w", b.name, err)
	}
	return &r, nil
}
