package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// Defaults. The subnet and bridge are picked to be unlikely to clash with
// anything else on the host; boxes get host numbers 11 and up.
const (
	DefaultDir    = "/var/lib/relayfleet/lab"
	DirEnv        = "RELAYFLEET_LAB_DIR" // overrides DefaultDir
	DefaultBridge = "rflab0"
	DefaultMirror = "http://deb.debian.org/debian"
)

// DefaultSubnet is the lab bridge's subnet; the host takes its first address.
var DefaultSubnet = netip.MustParsePrefix("10.231.77.0/24")

// Shape is a box's size.
type Shape struct {
	Cores int   // what nproc shows inside the box
	RAM   int64 // bytes: the box's memory cgroup limit
}

// The lab shapes of inventories/providers.yaml.
var (
	Small  = Shape{Cores: 1, RAM: 1 << 30}
	Medium = Shape{Cores: 2, RAM: 2 << 30}
)

// minRAM is the least memory a box boots with.
const minRAM = 128 << 20

// Spec is what Create makes.
type Spec struct {
	Name           string
	Shape          Shape
	Labels         map[string]string // fleet, tier, event, ...
	AuthorizedKeys []string          // authorized_keys lines for root, besides the lab's admin key
}

// Box states.
const (
	StateRunning = "running"
	StateStopped = "stopped"
)

// Box is a lab box as stored in its metadata, plus what is running now.
type Box struct {
	Name           string            `json:"name"`
	Address        netip.Addr        `json:"address"`
	HostKey        string            `json:"host_key"` // authorized_keys form
	Cores          int               `json:"cores"`
	RAM            int64             `json:"ram"`
	CPUs           string            `json:"cpus"` // cpuset list, e.g. "1"
	Labels         map[string]string `json:"labels,omitempty"`
	AuthorizedKeys []string          `json:"authorized_keys,omitempty"`
	Image          string            `json:"image"`
	Created        time.Time         `json:"created"`

	State      string `json:"-"` // StateRunning or StateStopped
	PID        int    `json:"-"` // the launcher (systemd-nspawn), when running
	MemoryUsed int64  `json:"-"` // memory cgroup usage in bytes, when running
}

// SSHAddr is the box's sshd address, host:port.
func (b Box) SSHAddr() string { return net.JoinHostPort(b.Address.String(), "22") }

// metaVersion is the metadata file's format version.
const metaVersion = 1

type metaFile struct {
	Version int `json:"version"`
	Box
}

func marshalMeta(b Box) ([]byte, error) {
	return json.MarshalIndent(metaFile{Version: metaVersion, Box: b}, "", "  ")
}

func unmarshalMeta(data []byte) (Box, error) {
	var m metaFile
	if err := json.Unmarshal(data, &m); err != nil {
		return Box{}, err
	}
	if m.Version != metaVersion {
		return Box{}, fmt.Errorf("metadata version %d, want %d", m.Version, metaVersion)
	}
	if err := ValidName(m.Name); err != nil {
		return Box{}, err
	}
	return m.Box, nil
}

// ErrNotFound is returned by Get for a box that does not exist.
var ErrNotFound = errors.New("no such box")

// ErrNotRoot is returned when the lab is used without root.
var ErrNotRoot = errors.New("root is needed to run lab boxes (systemd-nspawn, bridges, cgroups)")

// Config configures a Lab; the zero value is the default lab.
type Config struct {
	Dir         string        // state directory; default $RELAYFLEET_LAB_DIR, else DefaultDir
	ImageDir    string        // image cache; default Dir/images (images are immutable: labs may share one)
	Bridge      string        // default DefaultBridge
	Subnet      netip.Prefix  // default DefaultSubnet
	Mirror      string        // Debian mirror for the image; default DefaultMirror
	Recipe      Recipe        // default BaseRecipe()
	BootTimeout time.Duration // Create's wait for SSH; default 2 minutes
	// Logf reports progress of long steps (image build, boot); nil discards.
	Logf func(format string, args ...any)
}

// Lab is a set of lab boxes on this machine sharing a state directory,
// a bridge and an image cache.
type Lab struct {
	cfg    Config
	mu     sync.Mutex
	signer ssh.Signer
}

// New returns the lab described by cfg. It touches nothing on the host.
func New(cfg Config) (*Lab, error) {
	if cfg.Dir == "" {
		cfg.Dir = os.Getenv(DirEnv)
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if !filepath.IsAbs(cfg.Dir) {
		abs, err := filepath.Abs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		cfg.Dir = abs
	}
	if cfg.ImageDir == "" {
		cfg.ImageDir = filepath.Join(cfg.Dir, "images")
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if len(cfg.Bridge) > 15 || strings.ContainsAny(cfg.Bridge, "/ \t\n") {
		return nil, fmt.Errorf("lab: bridge name %q: want at most 15 characters", cfg.Bridge)
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if _, err := nextAddress(cfg.Subnet, nil); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if cfg.Mirror == "" {
		cfg.Mirror = DefaultMirror
	}
	if cfg.Recipe.Suite == "" {
		cfg.Recipe = BaseRecipe()
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	return &Lab{cfg: cfg}, nil
}

// Dir is the lab's state directory.
func (l *Lab) Dir() string { return l.cfg.Dir }

// AdminKeyPath is the lab's admin SSH private key; root on every box
// accepts it.
func (l *Lab) AdminKeyPath() string { return filepath.Join(l.cfg.Dir, "id_ed25519") }

// KnownHostsPath is a known_hosts file with every box's pinned host key.
func (l *Lab) KnownHostsPath() string { return filepath.Join(l.cfg.Dir, "known_hosts") }

func (l *Lab) logf(format string, args ...any) {
	if l.cfg.Logf != nil {
		l.cfg.Logf(format, args...)
	}
}

func (l *Lab) boxDir(name string) string    { return filepath.Join(l.cfg.Dir, "boxes", name) }
func (l *Lab) rootDir(name string) string   { return filepath.Join(l.boxDir(name), "root") }
func (l *Lab) cgroupRel(name string) string { return filepath.Join(l.cgroupGroup(), name) }

// Signer is the lab's admin key, generated on first use.
func (l *Lab) Signer() (ssh.Signer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.signer != nil {
		return l.signer, nil
	}
	s, err := loadOrCreateKey(l.AdminKeyPath(), "relayfleet-lab")
	if err != nil {
		return nil, err
	}
	l.signer = s
	return s, nil
}

// checkHost fails early, with the reason, on a host that cannot run boxes.
func checkHost() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		return errors.New("systemd-nspawn not found (apt-get install systemd-container)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("ip not found (apt-get install iproute2)")
	}
	_, err := hierarchies()
	return err
}

// readBox reads a box's metadata and what runs now.
func (l *Lab) readBox(name string) (Box, error) {
	data, err := os.ReadFile(filepath.Join(l.boxDir(name), "box.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Box{}, fmt.Errorf("box %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Box{}, fmt.Errorf("box %s: %w", name, err)
	}
	b, err := unmarshalMeta(data)
	if err != nil {
		return Box{}, fmt.Errorf("box %s: metadata: %w", name, err)
	}
	b.State = StateStopped
	if pid := l.launcherPID(name); pid > 0 {
		b.State, b.PID = StateRunning, pid
		b.MemoryUsed = memoryUsed(l.cgroupRel(name))
	}
	return b, nil
}

// launcherPID is the pid of the box's running launcher, or 0.
func (l *Lab) launcherPID(name string) int {
	return alive(filepath.Join(l.boxDir(name), "pid"))
}

func (l *Lab) names() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(l.cfg.Dir, "boxes"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && ValidName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Get returns the box called name, or an error wrapping ErrNotFound.
func (l *Lab) Get(_ context.Context, name string) (Box, error) {
	if err := ValidName(name); err != nil {
		return Box{}, err
	}
	return l.readBox(name)
}

// List returns the boxes that carry every label in labels (all boxes for
// none), sorted by name.
func (l *Lab) List(_ context.Context, labels map[string]string) ([]Box, error) {
	names, err := l.names()
	if err != nil {
		return nil, err
	}
	var boxes []Box
	for _, n := range names {
		b, err := l.readBox(n)
		if errors.Is(err, ErrNotFound) {
			continue // a crash between mkdir and the metadata; Cleanup removes it
		}
		if err != nil {
			return nil, err
		}
		if matchLabels(b.Labels, labels) {
			boxes = append(boxes, b)
		}
	}
	slices.SortFunc(boxes, func(a, b Box) int { return strings.Compare(a.Name, b.Name) })
	return boxes, nil
}

// Create makes the box and boots it, returning when SSH answers with the
// box's host key. A box that exists is started if it is stopped and
// returned as it is (its shape and labels are not changed), provided its
// fleet, tier and event labels are spec's: a box of that name with other
// labels is another box, and Create refuses it (backend.CheckAdopt).
func (l *Lab) Create(ctx context.Context, spec Spec) (Box, error) {
	start := time.Now()
	b, err := l.Start(ctx, spec)
	if err != nil {
		return Box{}, err
	}
	if err := l.Wait(ctx, b.Name); err != nil {
		return Box{}, err
	}
	l.logf("%s: ssh ready at %s after %.1fs", spec.Name, b.Address, time.Since(start).Seconds())
	return l.readBox(spec.Name)
}

// Start is Create without the wait for SSH: it makes the box if it is new
// and starts it unless it runs. Starting boxes one by one and then waiting
// for them together boots a fleet quickly, with addresses in order.
func (l *Lab) Start(ctx context.Context, spec Spec) (Box, error) {
	if err := ValidName(spec.Name); err != nil {
		return Box{}, fmt.Errorf("create: %w", err)
	}
	if spec.Shape.Cores <= 0 || spec.Shape.RAM < minRAM {
		return Box{}, fmt.Errorf("create %s: shape %d cores, %d bytes: want at least 1 core and %d MiB", spec.Name, spec.Shape.Cores, spec.Shape.RAM, minRAM>>20)
	}
	for _, k := range spec.AuthorizedKeys {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(strings.TrimSpace(k), "\n") {
			return Box{}, fmt.Errorf("create %s: authorized key %.20q...: not one authorized_keys line", spec.Name, k)
		}
	}
	// Refuse another box of the name before any slow step (and again
	// under the lab lock).
	if b, err := l.readBox(spec.Name); err == nil {
		if err := backend.CheckAdopt("box", b.Name, b.Name, b.Labels, spec.Labels); err != nil {
			return Box{}, fmt.Errorf("create %s: %w", spec.Name, err)
		}
	}
	if err := checkHost(); err != nil {
		return Box{}, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	hash, err := l.EnsureImage(ctx)
	if err != nil {
		return Box{}, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	signer, err := l.Signer()
	if err != nil {
		return Box{}, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	b, err := l.startLocked(ctx, spec, hash, signer)
	if err != nil {
		return Box{}, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	return b, nil
}

// Wait waits until the box's sshd answers with its pinned host key and
// accepts the admin key, for at most Config.BootTimeout.
func (l *Lab) Wait(ctx context.Context, name string) error {
	b, err := l.Get(ctx, name)
	if err != nil {
		return err
	}
	signer, err := l.Signer()
	if err != nil {
		return err
	}
	hostKey, err := ParseHostKey(b.HostKey)
	if err != nil {
		return fmt.Errorf("box %s: %w", name, err)
	}
	// Stop waiting when the launcher exits (nspawn failed, the box powered off).
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		for wctx.Err() == nil {
			if l.launcherPID(name) == 0 {
				cancel(errors.New("the box stopped while booting"))
				return
			}
			ctxtime.Sleep(wctx, 200*time.Millisecond)
		}
	}()
	console := filepath.Join(l.boxDir(name), "console.log")
	if err := WaitSSH(wctx, b.SSHAddr(), signer, hostKey, l.cfg.BootTimeout); err != nil {
		if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
			err = fmt.Errorf("%w: %s", cause, lastLine(console))
		}
		return fmt.Errorf("box %s: %w (console log: %s)", name, err, console)
	}
	return nil
}

// startLocked makes the box if it is new and starts it unless it runs, with
// the lab lock held.
func (l *Lab) startLocked(ctx context.Context, spec Spec, hash string, signer ssh.Signer) (Box, error) {
	unlock, err := lockFile(ctx, filepath.Join(l.cfg.Dir, "lock"))
	if err != nil {
		return Box{}, err
	}
	defer unlock()
	if err := l.cleanupLocked(ctx, false); err != nil {
		return Box{}, err
	}
	b, err := l.readBox(spec.Name)
	if err == nil {
		if err := backend.CheckAdopt("box", b.Name, b.Name, b.Labels, spec.Labels); err != nil {
			return Box{}, err
		}
	}
	switch {
	case err == nil && b.State == StateRunning:
		return b, nil
	case errors.Is(err, ErrNotFound):
		if b, err = l.newBox(ctx, spec, hash, signer); err != nil {
			return Box{}, err
		}
	case err != nil:
		return Box{}, err
	}
	if err := l.ensureBridge(ctx); err != nil {
		return Box{}, err
	}
	if err := l.boot(b); err != nil {
		return Box{}, err
	}
	return l.readBox(b.Name)
}

// newBox allocates an address and CPUs, generates the host key, mounts the
// overlay, writes the box's own files and, last, its metadata.
func (l *Lab) newBox(ctx context.Context, spec Spec, hash string, signer ssh.Signer) (Box, error) {
	others, err := l.List(ctx, nil)
	if err != nil {
		return Box{}, err
	}
	var used []netip.Addr
	load := map[int]int{}
	for _, o := range others {
		used = append(used, o.Address)
		cpus, _ := parseCPUList(o.CPUs)
		for _, c := range cpus {
			load[c]++
		}
	}
	addr, err := nextAddress(l.cfg.Subnet, used)
	if err != nil {
		return Box{}, err
	}
	host, err := hostCPUs()
	if err != nil {
		return Box{}, err
	}
	cpus, err := pickCPUs(host, load, spec.Shape.Cores)
	if err != nil {
		return Box{}, err
	}
	priv, pub, err := newKey("root@" + spec.Name)
	if err != nil {
		return Box{}, fmt.Errorf("host key: %w", err)
	}
	b := Box{
		Name:           spec.Name,
		Address:        addr,
		HostKey:        pub,
		Cores:          spec.Shape.Cores,
		RAM:            spec.Shape.RAM,
		CPUs:           formatCPUList(cpus),
		Labels:         spec.Labels,
		AuthorizedKeys: spec.AuthorizedKeys,
		Image:          hash,
		Created:        time.Now().UTC().Truncate(time.Second),
	}
	dir := l.boxDir(b.Name)
	if err := l.removeTree(dir); err != nil { // a crash before the metadata was written
		return Box{}, err
	}
	if err := l.mount(b); err != nil {
		return Box{}, err
	}
	root := l.rootDir(b.Name)
	adminPub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " relayfleet-lab" // AdminAuthorizedKey
	files := []File{
		{Path: "/etc/hostname", Mode: 0o644, Content: b.Name + "\n"},
		{Path: "/etc/hosts", Mode: 0o644, Content: renderHosts(b.Name)},
		{Path: "/etc/machine-id", Mode: 0o444, Content: newMachineID()},
		{Path: "/etc/ssh/ssh_host_ed25519_key", Mode: 0o600, Content: string(priv)},
		{Path: "/etc/ssh/ssh_host_ed25519_key.pub", Mode: 0o644, Content: pub + "\n"},
		{Path: "/root/.ssh/authorized_keys", Mode: 0o600, Content: renderAuthorizedKeys(append([]string{adminPub}, b.AuthorizedKeys...))},
		{Path: "/etc/systemd/network/10-host0.network", Mode: 0o644, Content: renderNetwork(b.Address, l.cfg.Subnet)},
	}
	if err := os.MkdirAll(filepath.Join(root, "root/.ssh"), 0o700); err != nil {
		return Box{}, err
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(root, f.Path), f.Content, f.Mode); err != nil {
			return Box{}, fmt.Errorf("box files: %w", err)
		}
	}
	data, err := marshalMeta(b)
	if err != nil {
		return Box{}, err
	}
	if err := atomicWrite(filepath.Join(dir, "box.json"), data, 0o644); err != nil {
		return Box{}, err
	}
	if err := l.writeKnownHosts(ctx); err != nil {
		return Box{}, err
	}
	l.logf("%s: created at %s, cpus %s, %d MiB", b.Name, b.Address, b.CPUs, b.RAM>>20)
	return b, nil
}

// mount mounts the box's overlay root over its image.
func (l *Lab) mount(b Box) error {
	lower := l.imageDir(b.Image)
	if ok, err := imageReady(lower, b.Image); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("image %s of this box is gone; delete the box and create it again", b.Image)
	}
	dir := l.boxDir(b.Name)
	return mountOverlay(b.Name, lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "root"))
}

// boot starts the box's launcher: a shell that moves itself into the box's
// cgroups, then execs systemd-nspawn with systemd (behind the init shim) as
// PID 1. The launcher outlives this process, so it is not tied to a ctx.
func (l *Lab) boot(b Box) error {
	if err := l.mount(b); err != nil {
		return err
	}
	procs, err := l.setupCgroups(b.Name, b.CPUs, b.RAM)
	if err != nil {
		return err
	}
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		return errors.New("systemd-nspawn not found (apt-get install systemd-container)")
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, p := range procs {
		fmt.Fprintf(&script, "echo $$ > '%s'\n", p) // paths are ours: no quotes in them
	}
	script.WriteString(`exec "$@"` + "\n")
	args := []string{"-c", script.String(), "relayfleet-lab-" + b.Name,
		nspawn, "--quiet", "--register=no", "--keep-unit", "--kill-signal=SIGRTMIN+3",
		"--machine=" + l.machineName(b.Name), "--directory=" + l.rootDir(b.Name),
		"--network-bridge=" + l.cfg.Bridge, "--console=read-only",
		"--resolv-conf=off", "--timezone=off", "--link-journal=no",
		initPath}
	logPath := filepath.Join(l.boxDir(b.Name), "console.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	pf, err := pidFile(cmd.Process.Pid) // before Wait can reap it
	if err == nil {
		err = atomicWrite(filepath.Join(l.boxDir(b.Name), "pid"), pf, 0o644)
	}
	go cmd.Wait() // reap it if it ends while this process lives
	if err != nil {
		cmd.Process.Kill()
		return fmt.Errorf("boot: %w", err)
	}
	l.logf("%s: booting (pid %d, console log %s)", b.Name, cmd.Process.Pid, logPath)
	return nil
}

// machineName is the box's systemd-nspawn machine name: the lab's bridge
// before the box's name. nspawn names the host end of the box's veth pair
// after it (vb-NAME, cut with a hash of the whole name when longer than an
// interface name may be), and interface names are the host's, not the
// lab's: two labs' boxes of one name (two tests' fleets side by side) would
// otherwise fight over one vb-NAME.
func (l *Lab) machineName(name string) string { return l.cfg.Bridge + "-" + name }

// Delete stops the box and removes it. Deleting a box that does not exist
// is not an error. The bridge goes when the last box does.
func (l *Lab) Delete(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	dir := l.boxDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("delete %s: %w", name, ErrNotRoot)
	}
	unlock, err := lockFile(ctx, filepath.Join(l.cfg.Dir, "lock"))
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	defer unlock()
	if err := l.stop(ctx, name); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := l.removeTree(dir); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := l.writeKnownHosts(ctx); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := l.cleanupLocked(ctx, true); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	l.logf("%s: deleted", name)
	return nil
}

// SetLabels makes labels the box's labels, in its metadata, while it
// runs on: a new label replaces no box.
func (l *Lab) SetLabels(ctx context.Context, name string, labels map[string]string) error {
	return l.updateMeta(ctx, name, func(b *Box) { b.Labels = maps.Clone(labels) })
}

// SetAuthorizedKeys records the admin keys the box's root now has (the
// caller wrote them on the box, over SSH, with the lab's admin key kept
// first); the box runs on.
func (l *Lab) SetAuthorizedKeys(ctx context.Context, name string, keys []string) error {
	return l.updateMeta(ctx, name, func(b *Box) { b.AuthorizedKeys = slices.Clone(keys) })
}

// AdminAuthorizedKey is the lab's admin key as an authorized_keys line,
// the one every box's root keeps.
func (l *Lab) AdminAuthorizedKey() (string, error) {
	signer, err := l.Signer()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " relayfleet-lab", nil
}

// updateMeta changes a box's metadata under the lab lock.
func (l *Lab) updateMeta(ctx context.Context, name string, change func(*Box)) error {
	if err := ValidName(name); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, filepath.Join(l.cfg.Dir, "lock"))
	if err != nil {
		return fmt.Errorf("box %s: %w", name, err)
	}
	defer unlock()
	b, err := l.readBox(name)
	if err != nil {
		return err
	}
	change(&b)
	data, err := marshalMeta(b)
	if err != nil {
		return err
	}
	if err := atomicWrite(filepath.Join(l.boxDir(name), "box.json"), data, 0o644); err != nil {
		return fmt.Errorf("box %s: metadata: %w", name, err)
	}
	return nil
}

// stopTimeout is how long a box gets to power off cleanly.
const stopTimeout = 20 * time.Second

// stop powers the box off (SIGTERM to nspawn, which asks systemd to power
// off), kills it after stopTimeout, then releases its mounts and cgroups.
func (l *Lab) stop(ctx context.Context, name string) error {
	if pid := l.launcherPID(name); pid > 0 {
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(stopTimeout)
		for l.launcherPID(name) > 0 && time.Now().Before(deadline) {
			if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		if pid := l.launcherPID(name); pid > 0 {
			l.logf("%s: no clean power-off in %s, killing it", name, stopTimeout)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return l.release(ctx, name)
}

// release removes what a box holds on the host once its launcher is gone:
// processes left in its cgroups, the cgroups, its mounts, its pid file.
func (l *Lab) release(ctx context.Context, name string) error {
	if err := removeCgroups(ctx, l.cgroupRel(name)); err != nil {
		return err
	}
	if err := unmountAll(l.boxDir(name)); err != nil {
		return err
	}
	// The box's own mount namespace holds its overlay until the kernel has
	// finished with its last process; mounting the same upper dir again
	// before that is undefined behaviour.
	upper := filepath.Join(l.boxDir(name), "upper")
	for i := 0; ; i++ {
		users := overlayUsers(upper)
		if len(users) == 0 {
			break
		}
		if i == 100 {
			return fmt.Errorf("overlay of %s still mounted in the mount namespace of pid %d", name, users[0])
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(l.boxDir(name), "pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Cleanup removes what a crash left behind: the leftovers of boxes whose
// launcher is gone (processes, cgroups, mounts), cgroups and half-made
// directories of boxes without metadata, and the bridge when no box runs.
// Boxes that run are not touched; stopped boxes keep their disk and start
// again on Create.
func (l *Lab) Cleanup(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("cleanup: %w", ErrNotRoot)
	}
	unlock, err := lockFile(ctx, filepath.Join(l.cfg.Dir, "lock"))
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer unlock()
	if err := l.cleanupLocked(ctx, true); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

func (l *Lab) cleanupLocked(ctx context.Context, bridge bool) error {
	names, err := l.names()
	if err != nil {
		return err
	}
	running := 0
	var errs []error
	for _, n := range names {
		if l.launcherPID(n) > 0 {
			running++
			continue
		}
		if _, err := os.Stat(filepath.Join(l.boxDir(n), "box.json")); errors.Is(err, fs.ErrNotExist) {
			l.logf("%s: removing a half-made box", n)
			if err := removeCgroups(ctx, l.cgroupRel(n)); err != nil {
				errs = append(errs, err)
			}
			if err := l.removeTree(l.boxDir(n)); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if l.holdsResources(n) {
			l.logf("%s: cleaning up after a crash (processes, cgroups, mounts)", n)
		}
		if err := l.release(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
	}
	// cgroups of boxes that are gone altogether
	hs, _ := hierarchies()
	seen := map[string]bool{}
	for _, h := range hs {
		ents, _ := os.ReadDir(filepath.Join(h, l.cgroupGroup()))
		for _, e := range ents {
			if !e.IsDir() || seen[e.Name()] || slices.Contains(names, e.Name()) {
				continue
			}
			seen[e.Name()] = true
			l.logf("%s: removing the cgroups of a deleted box", e.Name())
			if err := removeCgroups(ctx, filepath.Join(l.cgroupGroup(), e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(names) == 0 { // the lab's own cgroups, empty now
		for _, h := range hs {
			unix.Rmdir(filepath.Join(h, l.cgroupGroup()))
			unix.Rmdir(filepath.Join(h, filepath.Dir(l.cgroupGroup()))) // fails while other labs use it
		}
	}
	if bridge && running == 0 && l.bridgeExists() {
		l.logf("no box runs: removing bridge %s", l.cfg.Bridge)
		if err := l.deleteBridge(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// holdsResources reports whether a box whose launcher is gone still holds
// mounts, cgroups or a pid file.
func (l *Lab) holdsResources(name string) bool {
	if _, err := os.Stat(filepath.Join(l.boxDir(name), "pid")); err == nil {
		return true
	}
	if ms, _ := mountsUnder(l.boxDir(name)); len(ms) > 0 {
		return true
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "memory", l.cgroupRel(name)))
	return err == nil
}

func (l *Lab) writeKnownHosts(ctx context.Context) error {
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return err
	}
	return atomicWrite(l.KnownHostsPath(), []byte(renderKnownHosts(boxes)), 0o644)
}

// Dial opens an SSH connection to the box as root with the admin key,
// checking the box's pinned host key.
func (l *Lab) Dial(ctx context.Context, name string) (*ssh.Client, error) {
	b, err := l.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	signer, err := l.Signer()
	if err != nil {
		return nil, err
	}
	hk, err := ParseHostKey(b.HostKey)
	if err != nil {
		return nil, fmt.Errorf("box %s: %w", name, err)
	}
	return Dial(ctx, b.SSHAddr(), signer, hk)
}

// Run runs cmd on the box as root over SSH.
func (l *Lab) Run(ctx context.Context, name, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c, err := l.Dial(ctx, name)
	if err != nil {
		return err
	}
	defer c.Close()
	return Run(ctx, c, cmd, stdin, stdout, stderr)
}

// atomicWrite writes data to path through a temporary file and a rename.
func atomicWrite(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, mode)
}
