package relay_test

import (
	"os"
	"testing"
	"testing/fstest"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
)

func TestCgroupMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name  string
		fs    fstest.MapFS
		limit int64
		ok    bool
	}{
		{"v2 limit", fstest.MapFS{
			"proc/self/cgroup": file("0::/system.slice/relay@1.service\n"),
			"sys/fs/cgroup/system.slice/relay@1.service/memory.max": file("536870912\n"),
			"sys/fs/cgroup/system.slice/memory.max":                 file("max\n"),
		}, 512 << 20, true},
		{"v2 parent is smaller", fstest.MapFS{
			"proc/self/cgroup":             file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max": file("max\n"),
			"sys/fs/cgroup/a/memory.max":   file("1048576\n"),
		}, 1 << 20, true},
		{"v2 no limit", fstest.MapFS{
			"proc/self/cgroup":                    file("0::/user.slice\n"),
			"sys/fs/cgroup/user.slice/memory.max": file("max\n"),
		}, 0, false},
		{"v2 namespaced root", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("2097152\n"),
		}, 2 << 20, true},
		{"v1 limit", fstest.MapFS{
			"proc/self/cgroup": file("9:name=systemd:/\n4:memory:/relay/1\n1:cpu,cpuacct:/\n"),
			"sys/fs/cgroup/memory/relay/1/memory.limit_in_bytes": file("268435456\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":         file("9223372036854771712\n"),
		}, 256 << 20, true},
		{"v1 unlimited", fstest.MapFS{
			"proc/self/cgroup": file("4:memory:/process_api/x\n"),
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0, false},
		{"v1 path outside the mount", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("1073741824\n"),
		}, 1 << 30, true},
		{"hybrid: v2 without limit, v1 with", fstest.MapFS{
			"proc/self/cgroup":                             file("4:memory:/r\n0::/r\n"),
			"sys/fs/cgroup/r/memory.max":                   file("max\n"),
			"sys/fs/cgroup/memory/r/memory.limit_in_bytes": file("4194304\n"),
		}, 4 << 20, true},
		{"no memory controller", fstest.MapFS{
			"proc/self/cgroup": file("1:cpu:/\n"),
		}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit, ok, err := relay.CgroupMemoryLimit(tt.fs)
			if err != nil {
				t.Fatal(err)
			}
			if limit != tt.limit || ok != tt.ok {
				t.Fatalf("got %d, %v; want %d, %v", limit, ok, tt.limit, tt.ok)
			}
		})
	}
	t.Run("garbage", func(t *testing.T) {
		_, _, err := relay.CgroupMemoryLimit(fstest.MapFS{
			"proc/self/cgroup":           file("0::/x\n"),
			"sys/fs/cgroup/x/memory.max": file("lots\n"),
		})
		if err == nil {
			t.Fatal("no error for an unparsable memory.max")
		}
	})
	t.Run("no proc", func(t *testing.T) {
		if _, _, err := relay.CgroupMemoryLimit(fstest.MapFS{}); err == nil {
			t.Fatal("no error without /proc/self/cgroup")
		}
	})
	t.Run("this machine", func(t *testing.T) {
		if _, _, err := relay.CgroupMemoryLimit(os.DirFS("/")); err != nil {
			testutil.Skipf(t, "no cgroup here: %v", err)
		}
	})
}
