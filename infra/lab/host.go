package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// ErrNoCgroupV1 is returned on a host without the cgroup v1 memory and
// cpuset hierarchies that lab boxes rely on.
var ErrNoCgroupV1 = errors.New("the cgroup v1 memory and cpuset hierarchies are not mounted under /sys/fs/cgroup")

// hierarchies lists the mounted cgroup hierarchies (one path per mount).
func hierarchies() ([]string, error) {
	procs, err := filepath.Glob(filepath.Join(cgroupRoot, "*", "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var hs []string
	seen := map[string]bool{}
	for _, p := range procs {
		h := filepath.Dir(p)
		real, err := filepath.EvalSymlinks(h) // cpu -> cpu,cpuacct
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		hs = append(hs, h)
	}
	if !slices.Contains(hs, filepath.Join(cgroupRoot, "memory")) || !slices.Contains(hs, filepath.Join(cgroupRoot, "cpuset")) {
		return nil, ErrNoCgroupV1
	}
	return hs, nil
}

// cgroupGroup is the lab's cgroup below each hierarchy's root; boxes live
// one level down.
func (l *Lab) cgroupGroup() string { return filepath.Join("relayfleet", l.cfg.Bridge) }

// hostCPUs lists the CPUs the lab may use.
func hostCPUs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "cpuset", "cpuset.effective_cpus"))
	if err != nil {
		if b, err = os.ReadFile(filepath.Join(cgroupRoot, "cpuset", "cpuset.cpus")); err != nil {
			return nil, fmt.Errorf("cpus: %w", err)
		}
	}
	return parseCPUList(string(b))
}

// setupCgroups makes the box's cgroup in every hierarchy, with its cpuset
// and memory limit, and returns the cgroup.procs files that the launcher
// writes itself into.
func (l *Lab) setupCgroups(name, cpus string, ram int64) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var procs []string
	for _, h := range hs {
		rel := filepath.Join(l.cgroupGroup(), name)
		if err := os.MkdirAll(filepath.Join(h, rel), 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if _, err := os.Stat(filepath.Join(h, "cpuset.cpus")); err == nil {
			// Each level needs cpus and mems before a task can join.
			parent := h
			for _, part := range strings.Split(rel, "/") {
				dir := filepath.Join(parent, part)
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					if cur, _ := os.ReadFile(filepath.Join(dir, f)); len(bytes.TrimSpace(cur)) > 0 && dir != filepath.Join(h, rel) {
						continue
					}
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return nil, fmt.Errorf("cgroup: %w", err)
					}
					if err := writeCgroup(dir, f, string(bytes.TrimSpace(v))); err != nil {
						return nil, err
					}
				}
				parent = dir
			}
			if err := writeCgroup(filepath.Join(h, rel), "cpuset.cpus", cpus); err != nil {
				return nil, err
			}
		}
		if _, err := os.Stat(filepath.Join(h, "memory.limit_in_bytes")); err == nil {
			if err := writeCgroup(filepath.Join(h, rel), "memory.limit_in_bytes", strconv.FormatInt(ram, 10)); err != nil {
				return nil, err
			}
			if _, err := os.Stat(filepath.Join(h, rel, "memory.memsw.limit_in_bytes")); err == nil {
				writeCgroup(filepath.Join(h, rel), "memory.memsw.limit_in_bytes", strconv.FormatInt(ram, 10))
			}
		}
		procs = append(procs, filepath.Join(h, rel, "cgroup.procs"))
	}
	return procs, nil
}

func writeCgroup(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// cgroupPIDs lists every process in the cgroup subtree rel of every hierarchy.
func cgroupPIDs(rel string) []int {
	hs, _ := hierarchies()
	var pids []int
	for _, h := range hs {
		filepath.WalkDir(filepath.Join(h, rel), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for f := range strings.FieldsSeq(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroups kills every process left in the cgroup subtree rel of
// every hierarchy and removes the cgroups, deepest first.
func removeCgroups(ctx context.Context, rel string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cgroupPIDs(rel)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", rel, pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	hs, _ := hierarchies()
	var errs []error
	for _, h := range hs {
		var dirs []string
		filepath.WalkDir(filepath.Join(h, rel), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := rmdirRetry(ctx, d); err != nil {
				errs = append(errs, fmt.Errorf("cgroup: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory; the kernel can report EBUSY for a
// moment after its last process died.
func rmdirRetry(ctx context.Context, d string) error {
	var err error
	for range 20 {
		if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("rmdir %s: %w", d, err)
}

// memoryUsed is the memory cgroup usage of the subtree rel, 0 if unknown.
func memoryUsed(rel string) int64 {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "memory", rel, "memory.usage_in_bytes"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mounts: %w", err)
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			ms = append(ms, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mounts: %w", err)
	}
	slices.SortFunc(ms, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return ms, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll unmounts everything at or below dir.
func unmountAll(dir string) error {
	for range 3 {
		ms, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			if err := unix.Unmount(m, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
					return fmt.Errorf("unmount %s: %w", m, err)
				}
			}
		}
	}
	if ms, _ := mountsUnder(dir); len(ms) > 0 {
		return fmt.Errorf("unmount: %s still mounted", ms[0])
	}
	return nil
}

// removeTree unmounts everything below dir, then removes it. It refuses
// to remove a tree that still has mounts in it.
func (l *Lab) removeTree(dir string) error {
	if err := unmountAll(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}

// mountOverlay mounts the box's overlay root unless it is mounted.
func mountOverlay(name, lower, upper, work, root string) error {
	if ms, err := mountsUnder(root); err != nil {
		return err
	} else if slices.Contains(ms, root) {
		return nil
	}
	for _, d := range []string{upper, work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("relayfleet-"+name, root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay: mount %s: %w", root, err)
	}
	return nil
}

// procStat is what /proc/PID/stat says about a process: its state letter
// and its start time (clock ticks after boot), which tells a process from a
// later one with the same pid.
func procStat(pid int) (state byte, start uint64, ok bool) {
	if pid <= 0 {
		return 0, 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(stat, ')') // comm may hold spaces and parens
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3 (state), f[19] field 22 (starttime)
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err == nil
}

// pidFile is what a launcher's pid file holds: "PID STARTTIME".
func pidFile(pid int) ([]byte, error) {
	_, start, ok := procStat(pid)
	if !ok {
		return nil, fmt.Errorf("process %d is gone", pid)
	}
	return fmt.Appendf(nil, "%d %d\n", pid, start), nil
}

// alive reads a pid file and returns the pid if that very process (same
// start time) lives and is not a zombie, else 0. Identity by start time,
// not by command line: /proc/PID/cmdline reads empty while a process execs.
func alive(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0
	}
	pid, err1 := strconv.Atoi(f[0])
	want, err2 := strconv.ParseUint(f[1], 10, 64)
	state, start, ok := procStat(pid)
	if err1 != nil || err2 != nil || !ok || start != want || state == 'Z' || state == 'X' {
		return 0
	}
	return pid
}

// overlayUsers lists processes (one per mount namespace) that have an
// overlay with upperdir upper mounted; a killed box's mount goes away with
// the last process of its namespace.
func overlayUsers(upper string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	seen := map[string]bool{}
	var pids []int
	needle := []byte("upperdir=" + upper + ",")
	for _, p := range procs {
		ns, err := os.Readlink(filepath.Join(p, "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		mi, err := os.ReadFile(filepath.Join(p, "mountinfo"))
		if err != nil || !bytes.Contains(mi, needle) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ensureBridge creates the lab bridge with the host's address, if needed.
func (l *Lab) ensureBridge(ctx context.Context) error {
	br := l.cfg.Bridge
	if _, err := os.Stat(filepath.Join("/sys/class/net", br)); errors.Is(err, fs.ErrNotExist) {
		if err := ip(ctx, "link", "add", br, "type", "bridge"); err != nil {
			return err
		}
	}
	addr := fmt.Sprintf("%s/%d", bridgeAddr(l.cfg.Subnet), l.cfg.Subnet.Bits())
	if err := ip(ctx, "addr", "replace", addr, "dev", br); err != nil {
		return err
	}
	return ip(ctx, "link", "set", br, "up")
}

// deleteBridge removes the lab bridge if it exists.
func (l *Lab) deleteBridge(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", l.cfg.Bridge)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return ip(ctx, "link", "del", l.cfg.Bridge)
}

// bridgeExists reports whether the lab bridge exists.
func (l *Lab) bridgeExists() bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", l.cfg.Bridge))
	return err == nil
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bridge: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// lockFile takes an exclusive flock on path, waiting for it (or ctx), and
// returns the unlock func. flock is per open file, so it also serialises
// goroutines of one process.
func lockFile(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := ctxtime.Sleep(ctx, 50*time.Millisecond); err != nil {
			f.Close()
			return nil, err
		}
	}
}
