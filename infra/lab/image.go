package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// File is one file a recipe writes into the image, path relative to its root.
type File struct {
	Path    string      `json:"path"`
	Mode    fs.FileMode `json:"mode"`
	Content string      `json:"content"`
}

// Recipe is how the lab image is built: debootstrap, then setup steps. Its
// Hash keys the image cache, so any change to it builds a new image.
type Recipe struct {
	Suite    string   `json:"suite"`
	Variant  string   `json:"variant"`
	Packages []string `json:"packages"`
	// Setup steps, applied in this order after debootstrap.
	Remove []string    `json:"remove"` // globs
	Empty  []string    `json:"empty"`  // files truncated to zero bytes
	Links  [][2]string `json:"links"`  // {path, target}
	Files  []File      `json:"files"`
}

// Hash is a short hex digest of the recipe.
func (r Recipe) Hash() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a Recipe always marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// initPath is the box's PID 1 shim, inside the image.
const initPath = "/usr/local/sbin/relayfleet-init"

// initShim makes the cgroup v1 controller hierarchies writable (nspawn
// without user namespaces mounts them read-only, so the box's systemd could
// not set MemoryMax=), then hands PID 1 to systemd. The box's cgroup is the
// root of its cgroup namespace, so it reaches only its own subtree.
const initShim = `#!/bin/sh
# relayfleet lab box PID 1: make the cgroup controller hierarchies writable
# so that systemd can enforce MemoryMax= and friends, then exec systemd.
for d in /sys/fs/cgroup/*/; do
	case $d in */systemd/|*/unified/) continue ;; esac
	mount -o remount,bind,rw "$d" 2>/dev/null || echo "relayfleet-init: cannot make $d writable" >&2
done
exec /lib/systemd/systemd "$@"
`

// sshdConfig is the image's sshd drop-in: root by key only, the ed25519 host
// key that relayfleet writes into each box.
const sshdConfig = `# relayfleet lab box: root by key only; the host key is written by relayfleet.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
`

// BaseRecipe is the lab image: Debian bookworm with systemd as PID 1, dbus,
// sshd, iproute2 and procps, networkd on, and nothing that only slows a
// container's boot.
func BaseRecipe() Recipe {
	r := Recipe{
		Suite:    "bookworm",
		Variant:  "minbase",
		Packages: []string{"systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2", "procps"},
		Remove:   []string{"/etc/ssh/ssh_host_*", "/etc/hostname"},
		Empty:    []string{"/etc/machine-id"},
		Links: [][2]string{
			{"/etc/systemd/system/multi-user.target.wants/systemd-networkd.service", "/lib/systemd/system/systemd-networkd.service"},
			{"/etc/systemd/system/default.target", "/lib/systemd/system/multi-user.target"},
		},
		Files: []File{
			{Path: initPath, Mode: 0o755, Content: initShim},
			{Path: "/etc/ssh/sshd_config.d/relayfleet.conf", Mode: 0o644, Content: sshdConfig},
		},
	}
	// Nothing useful in a container, or only slows the boot.
	for _, u := range []string{"e2scrub_reap.service", "systemd-networkd-wait-online.service",
		"getty@tty1.service", "console-getty.service", "apt-daily.timer", "apt-daily-upgrade.timer"} {
		r.Links = append(r.Links, [2]string{"/etc/systemd/system/" + u, "/dev/null"})
	}
	return r
}

// imageStamp is written into a finished image; a box checks it.
const imageStamp = "/etc/relayfleet-image"

// imageDir is where the image with this hash lives.
func (l *Lab) imageDir(hash string) string { return filepath.Join(l.cfg.ImageDir, hash) }

// EnsureImage builds the lab image unless the cache holds one for the
// current recipe, and returns its hash. The image is built in a temporary
// directory and renamed into place, so a half-built image is never used.
func (l *Lab) EnsureImage(ctx context.Context) (string, error) {
	r := l.cfg.Recipe
	hash := r.Hash()
	dir := l.imageDir(hash)
	if ok, err := imageReady(dir, hash); err != nil || ok {
		return hash, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(l.cfg.ImageDir, "lock"))
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	defer unlock()
	if ok, err := imageReady(dir, hash); err != nil || ok { // built while we waited
		return hash, err
	}
	if err := l.removeStaleImageBuilds(); err != nil {
		return "", err
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return "", fmt.Errorf("image: debootstrap not found (apt-get install debootstrap)")
	}
	tmp := dir + ".tmp"
	logPath := dir + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	defer logf.Close()
	start := time.Now()
	l.logf("image %s: debootstrap %s from %s (a few minutes; log in %s)", hash, r.Suite, l.cfg.Mirror, logPath)
	cmd := exec.CommandContext(ctx, debootstrap, "--variant="+r.Variant,
		"--include="+strings.Join(r.Packages, ","), r.Suite, tmp, l.cfg.Mirror)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.WaitDelay = 10 * time.Second
	// If this process dies, debootstrap goes too, so the next run can
	// remove the half-built image.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		l.removeTree(tmp)
		return "", fmt.Errorf("image: debootstrap: %w (see %s)", err, logPath)
	}
	if err := applySetup(tmp, r); err != nil {
		l.removeTree(tmp)
		return "", fmt.Errorf("image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, imageStamp), []byte(hash+"\n"), 0o644); err != nil {
		l.removeTree(tmp)
		return "", fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		l.removeTree(tmp)
		return "", fmt.Errorf("image: %w", err)
	}
	l.logf("image %s: built in %.0fs", hash, time.Since(start).Seconds())
	return hash, nil
}

func imageReady(dir, hash string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageStamp))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("image: %w", err)
	}
	return strings.TrimSpace(string(b)) == hash, nil
}

// removeStaleImageBuilds removes half-built images a crash left behind
// (called with the image lock held).
func (l *Lab) removeStaleImageBuilds() error {
	tmps, _ := filepath.Glob(filepath.Join(l.cfg.ImageDir, "*.tmp"))
	for _, t := range tmps {
		l.logf("image: removing a half-built image %s", t)
		if err := l.removeTree(t); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	return nil
}

// applySetup runs the recipe's setup steps on the root at dir.
func applySetup(dir string, r Recipe) error {
	for _, g := range r.Remove {
		matches, err := filepath.Glob(filepath.Join(dir, g))
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		for _, m := range matches {
			if err := os.Remove(m); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
		}
	}
	for _, p := range r.Empty {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o444); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	for _, ln := range r.Links {
		p := filepath.Join(dir, ln[0])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		os.Remove(p)
		if err := os.Symlink(ln[1], p); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	for _, f := range r.Files {
		if err := writeFile(filepath.Join(dir, f.Path), f.Content, f.Mode); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	return nil
}

// writeFile writes content at p with mode, making parent directories.
func writeFile(p, content string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}
