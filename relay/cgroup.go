package relay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// cgroupV1Unlimited: cgroup v1 reports "no limit" as a huge page-rounded
// number (9223372036854771712 on x86-64); anything this large is no limit.
const cgroupV1Unlimited = 1 << 62

// CgroupMemoryLimit returns the memory limit that applies to this process,
// read from root (os.DirFS("/") normally): the smallest of the cgroup v2
// memory.max files of its cgroup and every ancestor, or, without cgroup v2
// limits, of the v1 memory.limit_in_bytes files. A cgroup path that is not
// under the mount (a container with its own cgroup namespace mounts its
// own cgroup as the root) falls back to the mount's root. ok is false when
// no limit is set.
func CgroupMemoryLimit(root fs.FS) (limit int64, ok bool, err error) {
	data, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false, fmt.Errorf("cgroup: %w", err)
	}
	var v2, v1 string
	haveV2, haveV1 := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1, haveV1 = parts[2], true
			}
		}
	}
	if haveV2 {
		if l, ok, err := smallestLimit(root, "sys/fs/cgroup", v2, "memory.max"); err != nil || ok {
			return l, ok, err
		}
	}
	if haveV1 {
		return smallestLimit(root, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
	}
	return 0, false, nil
}

// smallestLimit walks from mount/cgroupPath up to mount, reading file in
// each directory that has it.
func smallestLimit(root fs.FS, mount, cgroupPath, file string) (int64, bool, error) {
	dir := path.Join(mount, path.Clean("/" + cgroupPath)[1:])
	if _, err := fs.Stat(root, dir); err != nil {
		dir = mount // namespaced: our cgroup is the mount's root
	}
	var best int64
	found := false
	for {
		b, err := fs.ReadFile(root, path.Join(dir, file))
		switch {
		case err == nil:
			l, lim, perr := parseLimit(string(b))
			if perr != nil {
				return 0, false, fmt.Errorf("cgroup %s: %w", path.Join(dir, file), perr)
			}
			if lim && (!found || l < best) {
				best, found = l, true
			}
		case !errors.Is(err, fs.ErrNotExist):
			return 0, false, fmt.Errorf("cgroup: %w", err)
		}
		if dir == mount || dir == "." || dir == "/" {
			return best, found, nil
		}
		dir = path.Dir(dir)
	}
}

func parseLimit(s string) (int64, bool, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, err
	}
	if n >= cgroupV1Unlimited || n <= 0 {
		return 0, false, nil
	}
	return n, true, nil
}
