package lab

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestRecipeHash(t *testing.T) {
	base := BaseRecipe()
	if base.Hash() != BaseRecipe().Hash() {
		t.Fatal("the hash of the same recipe changes")
	}
	if len(base.Hash()) != 16 {
		t.Errorf("hash %q: want 16 hex digits", base.Hash())
	}
	for _, tc := range []struct {
		name   string
		change func(*Recipe)
	}{
		{"package added", func(r *Recipe) { r.Packages = append(r.Packages, "stress-ng") }},
		{"suite", func(r *Recipe) { r.Suite = "trixie" }},
		{"setup file", func(r *Recipe) { r.Files[0].Content += "# changed\n" }},
		{"file mode", func(r *Recipe) { r.Files[0].Mode = 0o700 }},
		{"link", func(r *Recipe) { r.Links = r.Links[1:] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := BaseRecipe()
			tc.change(&r)
			if r.Hash() == base.Hash() {
				t.Error("the hash did not change")
			}
		})
	}
	for _, p := range []string{"systemd", "dbus", "openssh-server", "iproute2", "procps"} {
		if !slices.Contains(base.Packages, p) {
			t.Errorf("the image lacks %s", p)
		}
	}
}

func TestApplySetup(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"etc/ssh/ssh_host_rsa_key", "etc/ssh/ssh_host_ed25519_key.pub", "etc/hostname", "etc/machine-id"} {
		if err := writeFile(filepath.Join(dir, f), "x\n", 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := applySetup(dir, BaseRecipe()); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "etc/ssh/ssh_host_*")); len(m) > 0 {
		t.Errorf("host keys left in the image: %v", m)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/machine-id")); err != nil || len(b) != 0 {
		t.Errorf("machine-id = %q, %v; want empty", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, initPath)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("init shim: %v %v", st, err)
	}
	if target, err := os.Readlink(filepath.Join(dir, "etc/systemd/system/console-getty.service")); err != nil || target != "/dev/null" {
		t.Errorf("console-getty not masked: %q %v", target, err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/systemd-networkd.service")); target == "" {
		t.Error("networkd not enabled")
	}
}

func TestSSHDConfig(t *testing.T) {
	for _, want := range []string{"HostKey /etc/ssh/ssh_host_ed25519_key\n", "PermitRootLogin prohibit-password\n", "PasswordAuthentication no\n"} {
		if !strings.Contains(sshdConfig, want) {
			t.Errorf("sshd config lacks %q", want)
		}
	}
	if !strings.Contains(initShim, "exec /lib/systemd/systemd") || !strings.Contains(initShim, "remount,bind,rw") {
		t.Error("the init shim must remount the cgroup hierarchies rw and exec systemd")
	}
}

func TestRenderNetwork(t *testing.T) {
	got := renderNetwork(netip.MustParseAddr("10.231.77.12"), DefaultSubnet)
	want := `# relayfleet lab box: static address on the lab bridge, no gateway.
[Match]
Name=host0

[Network]
Address=10.231.77.12/24
LinkLocalAddressing=no
IPv6AcceptRA=no
`
	if got != want {
		t.Errorf("network file:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(got, "Gateway") {
		t.Error("a lab box must have no gateway")
	}
}

func TestRenderFiles(t *testing.T) {
	if got := renderHosts("box1"); !strings.Contains(got, "127.0.1.1\tbox1\n") {
		t.Errorf("hosts: %q", got)
	}
	keys := renderAuthorizedKeys([]string{"ssh-ed25519 AAAA a", " ", "ssh-ed25519 AAAA a\n", "ssh-ed25519 BBBB b"})
	if keys != "ssh-ed25519 AAAA a\nssh-ed25519 BBBB b\n" {
		t.Errorf("authorized keys: %q", keys)
	}
	kh := renderKnownHosts([]Box{
		{Name: "box1", Address: netip.MustParseAddr("10.231.77.11"), HostKey: "ssh-ed25519 AAAA root@box1"},
		{Name: "box2"},
	})
	if kh != "10.231.77.11 ssh-ed25519 AAAA\n" {
		t.Errorf("known_hosts: %q", kh)
	}
	id := newMachineID()
	if len(id) != 33 || id == newMachineID() {
		t.Errorf("machine-id %q", id)
	}
}

func TestNextAddress(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		subnet string
		used   []netip.Addr
		want   string
	}{
		{"first", "10.231.77.0/24", nil, "10.231.77.11"},
		{"unmasked subnet", "10.231.77.5/24", nil, "10.231.77.11"},
		{"next", "10.231.77.0/24", []netip.Addr{a("10.231.77.11"), a("10.231.77.12")}, "10.231.77.13"},
		{"reuses a gap", "10.231.77.0/24", []netip.Addr{a("10.231.77.11"), a("10.231.77.13")}, "10.231.77.12"},
		{"last before broadcast", "10.0.0.0/28", []netip.Addr{a("10.0.0.11"), a("10.0.0.12"), a("10.0.0.13")}, "10.0.0.14"},
		{"full", "10.0.0.0/28", []netip.Addr{a("10.0.0.11"), a("10.0.0.12"), a("10.0.0.13"), a("10.0.0.14")}, ""},
		{"too small", "10.0.0.0/29", nil, ""},
		{"ipv6", "fd00::/64", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nextAddress(netip.MustParsePrefix(tc.subnet), tc.used)
			if tc.want == "" {
				if err == nil {
					t.Errorf("got %s, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
	if got := bridgeAddr(DefaultSubnet); got.String() != "10.231.77.1" {
		t.Errorf("bridge address %s", got)
	}
}

func TestPickCPUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		host []int
		load map[int]int
		n    int
		want string
	}{
		{"first small box", []int{0, 1}, nil, 1, "0"},
		{"second spreads", []int{0, 1}, map[int]int{0: 1}, 1, "1"},
		{"third wraps", []int{0, 1}, map[int]int{0: 1, 1: 1}, 1, "0"},
		{"medium takes both", []int{0, 1}, map[int]int{0: 3}, 2, "0-1"},
		{"least loaded", []int{0, 1, 2, 3}, map[int]int{0: 2, 1: 1, 2: 0, 3: 2}, 2, "1-2"},
		{"sparse host", []int{2, 5, 7}, map[int]int{2: 1}, 2, "5,7"},
		{"too many cores", []int{0, 1}, nil, 4, ""},
		{"no cores", []int{0, 1}, nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickCPUs(tc.host, tc.load, tc.n)
			if tc.want == "" {
				if err == nil {
					t.Errorf("got %v, want an error", got)
				}
				return
			}
			if err != nil || formatCPUList(got) != tc.want {
				t.Errorf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestCPUList(t *testing.T) {
	for _, s := range []string{"0", "0-1", "0-3,6", "1,3,5-7"} {
		c, err := parseCPUList(s)
		if err != nil || formatCPUList(c) != s {
			t.Errorf("%q: round trip %q, %v", s, formatCPUList(c), err)
		}
	}
	for _, s := range []string{"a", "3-1", "-1", "1,,2"} {
		if _, err := parseCPUList(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
	if c, _ := parseCPUList("0-1\n"); len(c) != 2 {
		t.Errorf("trailing newline: %v", c)
	}
}

func TestMetadata(t *testing.T) {
	b := Box{
		Name: "box1", Address: netip.MustParseAddr("10.231.77.11"), HostKey: "ssh-ed25519 AAAA root@box1",
		Cores: 1, RAM: 1 << 30, CPUs: "0", Labels: map[string]string{"fleet": "lab", "tier": "steady", "event": "final"},
		Image: "0123456789abcdef", Created: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
		State: StateRunning, PID: 42, MemoryUsed: 7,
	}
	data, err := marshalMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"version": 1`, `"address": "10.231.77.11"`, `"tier": "steady"`, `"ram": 1073741824`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("metadata lacks %s:\n%s", want, data)
		}
	}
	if strings.Contains(string(data), "42") {
		t.Errorf("runtime state stored in the metadata:\n%s", data)
	}
	got, err := unmarshalMeta(data)
	if err != nil {
		t.Fatal(err)
	}
	b.State, b.PID, b.MemoryUsed = "", 0, 0
	if got.Name != b.Name || got.Address != b.Address || got.Labels["event"] != "final" || !got.Created.Equal(b.Created) || got.CPUs != "0" {
		t.Errorf("round trip: %+v, want %+v", got, b)
	}
	for _, bad := range []string{`{"version":2,"name":"box1"}`, `{"version":1,"name":"../x"}`, `{`} {
		if _, err := unmarshalMeta([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestMatchLabels(t *testing.T) {
	have := map[string]string{"fleet": "lab", "tier": "burst"}
	for _, tc := range []struct {
		want map[string]string
		ok   bool
	}{
		{nil, true},
		{map[string]string{"fleet": "lab"}, true},
		{map[string]string{"fleet": "lab", "tier": "burst"}, true},
		{map[string]string{"tier": "steady"}, false},
		{map[string]string{"event": ""}, false},
	} {
		if got := matchLabels(have, tc.want); got != tc.ok {
			t.Errorf("matchLabels(%v) = %v", tc.want, got)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"box1", "b", "lab-burst-1"} {
		if err := ValidName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "1box", "Box1", "box_1", "box1-", "../x", "a-very-long-box"} {
		if ValidName(n) == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

func TestKeys(t *testing.T) {
	priv, pub, err := newKey("root@box1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseHostKey(pub)
	if err != nil || string(k.Marshal()) != string(s.PublicKey().Marshal()) {
		t.Errorf("public %q does not match the private key: %v", pub, err)
	}
	if !strings.HasPrefix(pub, "ssh-ed25519 ") || !strings.HasSuffix(pub, " root@box1") {
		t.Errorf("public key %q", pub)
	}
	// NewKey's public key carries no comment, and matches its private key.
	priv, pub, err = NewKey("root@x")
	if err != nil {
		t.Fatal(err)
	}
	if s, err = ssh.ParsePrivateKey(priv); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))); got != pub {
		t.Errorf("NewKey: public key %q, want the private key's %q", pub, got)
	}
	path := filepath.Join(t.TempDir(), "id_ed25519")
	s1, err := loadOrCreateKey(path, "x")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", st.Mode().Perm())
	}
	s2, err := loadOrCreateKey(path, "x")
	if err != nil || string(s1.PublicKey().Marshal()) != string(s2.PublicKey().Marshal()) {
		t.Errorf("the admin key changed on a second load: %v", err)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Setenv(DirEnv, "/tmp/x-lab")
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Dir() != "/tmp/x-lab" || l.cfg.ImageDir != "/tmp/x-lab/images" || l.cfg.Bridge != DefaultBridge || l.cfg.Subnet != DefaultSubnet {
		t.Errorf("defaults: %+v", l.cfg)
	}
	if _, err := New(Config{Bridge: "a-bridge-name-too-long"}); err == nil {
		t.Error("a long bridge name accepted")
	}
	if l.cgroupRel("box1") != "relayfleet/rflab0/box1" {
		t.Errorf("cgroup %s", l.cgroupRel("box1"))
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/a\040b`); got != "/var/lib/a b" {
		t.Errorf("got %q", got)
	}
}

func TestQEMU(t *testing.T) {
	q := QEMURecipe()
	if q.Hash() == BaseRecipe().Hash() || !slices.Contains(q.Packages, "linux-image-amd64") {
		t.Error("the qemu image must carry a kernel and be cached apart from the base image")
	}
	args := strings.Join(qemuArgs("vm1", Small, "kvm:tcg", "/k", "/i", "/d.img", "/c.log", 2222), " ")
	for _, want := range []string{
		"-accel kvm -accel tcg", "-smp 1 -m 1024", "-kernel /k -initrd /i",
		"root=/dev/vda rw console=ttyS0", "file=/d.img,if=virtio,format=raw",
		"hostfwd=tcp:127.0.0.1:2222-:22", "-serial file:/c.log", "-nodefaults",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("qemu args lack %q: %s", want, args)
		}
	}
}

func TestAlive(t *testing.T) {
	dir := t.TempDir()
	good, err := pidFile(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	write := func(s string) string {
		p := filepath.Join(dir, "pid")
		testutil.WriteFile(t, p, []byte(s), 0o644)
		return p
	}
	if got := alive(write(string(good))); got != os.Getpid() {
		t.Errorf("alive(own pid file %q) = %d", good, got)
	}
	pid, start, _ := strings.Cut(strings.TrimSpace(string(good)), " ")
	for _, bad := range []string{
		pid + " 1" + start + "\n", // same pid, another process
		pid + "\n",                // no start time
		"0 0\n", "x y\n", "",
	} {
		if got := alive(write(bad)); got != 0 {
			t.Errorf("alive(%q) = %d, want 0", bad, got)
		}
	}
	if got := alive(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("alive(missing) = %d", got)
	}
}

// TestCreateRefusesAnotherBoxOfTheName: a box of the name whose fleet,
// tier or event label differs is another box; Create refuses it with a
// one-line error naming the box and the label, and leaves it alone.
func TestCreateRefusesAnotherBoxOfTheName(t *testing.T) {
	// Should the refusal be missing, Create must fail fast, not build an
	// image and boot: a dead mirror, a short context, this helper's own
	// bridge and subnet.
	l, err := New(Config{Dir: t.TempDir(), Mirror: "http://127.0.0.1:9/debian", Bridge: "rfsafa0",
		Subnet: netip.MustParsePrefix("10.231.101.0/24"), BootTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	steady := map[string]string{"fleet": "f", "tier": "steady", "event": "none", "group": "fsn"}
	meta, err := marshalMeta(Box{Name: "fsn-1", Address: netip.MustParseAddr("10.231.77.11"), Labels: steady})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.boxDir("fsn-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.boxDir("fsn-1"), "box.json"), meta, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"fleet": "f", "tier": "burst", "event": "fsn"}, `label tier "steady", not "burst"`},
		{map[string]string{"fleet": "g", "tier": "steady", "event": "none"}, `label fleet "f", not "g"`},
		{map[string]string{"fleet": "f", "tier": "steady", "event": "x"}, `label event "none", not "x"`},
	} {
		_, err := l.Create(ctx, Spec{Name: "fsn-1", Shape: Small, Labels: tc.labels})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "fsn-1") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Create over %v: %v; want one line naming fsn-1 and %s", tc.labels, err, tc.want)
		}
	}
	if b, err := l.Get(t.Context(), "fsn-1"); err != nil || b.Labels["tier"] != "steady" {
		t.Errorf("the steady box after the refusals: %+v, %v", b, err)
	}
}

// TestSetLabelsAndKeysKeepTheBox: labels and the recorded admin keys
// change in the box's metadata; its address, host key and CPUs stay.
func TestSetLabelsAndKeysKeepTheBox(t *testing.T) {
	l, err := New(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := Box{
		Name: "box1", Address: netip.MustParseAddr("10.231.77.11"), HostKey: "ssh-ed25519 AAAA root@box1",
		Cores: 1, RAM: 1 << 30, CPUs: "0", Labels: map[string]string{"fleet": "lab", "tier": "steady", "event": "none", "team": "a"},
		AuthorizedKeys: []string{"ssh-ed25519 AAAA old"}, Image: "0123456789abcdef", Created: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
	}
	data, err := marshalMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicWrite(filepath.Join(l.boxDir("box1"), "box.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	want := map[string]string{"fleet": "lab", "tier": "steady", "event": "none", "team": "b"}
	if err := l.SetLabels(ctx, "box1", want); err != nil {
		t.Fatal(err)
	}
	if err := l.SetAuthorizedKeys(ctx, "box1", []string{"ssh-ed25519 AAAA new"}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Get(ctx, "box1")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Labels, want) || len(got.AuthorizedKeys) != 1 || got.AuthorizedKeys[0] != "ssh-ed25519 AAAA new" {
		t.Fatalf("labels %v keys %v", got.Labels, got.AuthorizedKeys)
	}
	if got.Address != b.Address || got.HostKey != b.HostKey || got.CPUs != b.CPUs || !got.Created.Equal(b.Created) {
		t.Fatalf("box changed: %+v, was %+v", got, b)
	}
	if bs, _ := l.List(ctx, map[string]string{"team": "b"}); len(bs) != 1 {
		t.Fatalf("list by the new label: %v", bs)
	}
	if err := l.SetLabels(ctx, "nobox", want); !errors.Is(err, ErrNotFound) {
		t.Fatalf("labels of a missing box: %v", err)
	}
}
