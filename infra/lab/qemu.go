package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// The real-kernel flavour: the lab image plus a Debian kernel, booted as a
// virtual machine under qemu. Slow under software emulation, but its kernel
// is its own, so what a lab box cannot change (net.core.rmem_max and the
// other sysctls that are not per network namespace) works as on a real
// server.

// vmNetwork configures the VM's NIC by DHCP from qemu's user-mode network.
const vmNetwork = `# relayfleet lab VM: qemu user-mode network.
[Match]
Name=eth* en*

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
`

// QEMURecipe is BaseRecipe plus a kernel (and the initramfs it brings) and
// a DHCP network for the VM's NIC.
func QEMURecipe() Recipe {
	r := BaseRecipe()
	r.Packages = append(r.Packages, "linux-image-amd64")
	r.Files = append(r.Files, File{Path: "/etc/systemd/network/20-vm.network", Mode: 0o644, Content: vmNetwork})
	return r
}

// VM is a running lab VM.
type VM struct {
	Name    string
	SSHAddr string // 127.0.0.1:PORT, forwarded to the VM's sshd
	HostKey string // authorized_keys form
	PID     int    // qemu
	Dir     string
}

// QEMUConfig is how a VM is run.
type QEMUConfig struct {
	Binary string // default qemu-system-x86_64
	// Accel is qemu's -accel list: "tcg" is software emulation, "kvm:tcg"
	// uses KVM when /dev/kvm works. Default: $RELAYFLEET_LAB_ACCEL, else tcg.
	Accel string
}

// qemuArgs is qemu's command line for a VM.
func qemuArgs(name string, shape Shape, accel, kernel, initrd, disk, console string, sshPort int) []string {
	var a []string
	cpu := "max" // every feature qemu can emulate
	if strings.HasPrefix(accel, "kvm") {
		cpu = "host"
	}
	for _, acc := range strings.Split(accel, ":") {
		a = append(a, "-accel", acc)
	}
	return append(a,
		"-name", "relayfleet-"+name,
		"-machine", "q35", "-cpu", cpu,
		"-smp", strconv.Itoa(shape.Cores), "-m", strconv.FormatInt(shape.RAM>>20, 10),
		"-nodefaults", "-display", "none", "-no-reboot",
		"-serial", "file:"+console,
		"-kernel", kernel, "-initrd", initrd,
		"-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1",
		"-drive", "file="+disk+",if=virtio,format=raw",
		"-netdev", fmt.Sprintf("user,id=n0,hostfwd=tcp:127.0.0.1:%d-:22", sshPort),
		"-device", "virtio-net-pci,netdev=n0",
	)
}

// BootVM makes a disk from the lab's image (Config.Recipe must carry a
// kernel: QEMURecipe) with the VM's own hostname, machine-id, host key and
// authorized keys, boots it under qemu and waits until SSH answers with the
// pinned host key (for at most Config.BootTimeout).
func (l *Lab) BootVM(ctx context.Context, spec Spec, qc QEMUConfig) (*VM, error) {
	if err := ValidName(spec.Name); err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, ErrNotRoot)
	}
	if qc.Binary == "" {
		qc.Binary = "qemu-system-x86_64"
	}
	if qc.Accel == "" {
		qc.Accel = os.Getenv("RELAYFLEET_LAB_ACCEL")
	}
	if qc.Accel == "" {
		qc.Accel = "tcg"
	}
	qemu, err := exec.LookPath(qc.Binary)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %s not found (apt-get install qemu-system-x86)", spec.Name, qc.Binary)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return nil, fmt.Errorf("vm %s: mkfs.ext4 not found (apt-get install e2fsprogs)", spec.Name)
	}
	hash, err := l.EnsureImage(ctx)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	image := l.imageDir(hash)
	kernels, _ := filepath.Glob(filepath.Join(image, "boot", "vmlinuz-*"))
	initrds, _ := filepath.Glob(filepath.Join(image, "boot", "initrd.img-*"))
	if len(kernels) == 0 || len(initrds) == 0 {
		return nil, fmt.Errorf("vm %s: image %s has no kernel and initrd (use QEMURecipe)", spec.Name, hash)
	}
	slices.Sort(kernels)
	slices.Sort(initrds)
	signer, err := l.Signer()
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}

	dir := filepath.Join(l.cfg.Dir, "vms", spec.Name)
	if err := l.stopVMDir(ctx, dir); err != nil { // an earlier run's
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	root := filepath.Join(dir, "root")
	if err := mountOverlay(spec.Name, image, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), root); err != nil {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	priv, pub, err := newKey("root@" + spec.Name)
	if err != nil {
		unmountAll(dir)
		return nil, fmt.Errorf("vm %s: host key: %w", spec.Name, err)
	}
	adminPub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " relayfleet-lab"
	files := []File{
		{Path: "/etc/hostname", Mode: 0o644, Content: spec.Name + "\n"},
		{Path: "/etc/hosts", Mode: 0o644, Content: renderHosts(spec.Name)},
		{Path: "/etc/machine-id", Mode: 0o444, Content: newMachineID()},
		{Path: "/etc/ssh/ssh_host_ed25519_key", Mode: 0o600, Content: string(priv)},
		{Path: "/etc/ssh/ssh_host_ed25519_key.pub", Mode: 0o644, Content: pub + "\n"},
		{Path: "/root/.ssh/authorized_keys", Mode: 0o600, Content: renderAuthorizedKeys(append([]string{adminPub}, spec.AuthorizedKeys...))},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(root, f.Path), f.Content, f.Mode); err != nil {
			unmountAll(dir)
			return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
		}
	}
	os.Chmod(filepath.Join(root, "root/.ssh"), 0o700)
	disk := filepath.Join(dir, "disk.img")
	start := time.Now()
	out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-t", "ext4", "-L", "relayfleet", "-d", root, disk, "4G").CombinedOutput()
	if uerr := unmountAll(dir); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		return nil, fmt.Errorf("vm %s: disk: %v: %s", spec.Name, err, out)
	}
	l.logf("vm %s: disk made in %.1fs", spec.Name, time.Since(start).Seconds())

	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	console := filepath.Join(dir, "console.log")
	args := qemuArgs(spec.Name, spec.Shape, qc.Accel, kernels[len(kernels)-1], initrds[len(initrds)-1], disk, console, port)
	logPath := filepath.Join(dir, "qemu.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	defer logf.Close()
	// qemu outlives this call: it is not tied to ctx.
	cmd := exec.Command(qemu, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm %s: qemu: %w", spec.Name, err)
	}
	// Stop waiting for SSH when qemu exits (a failed start, a kernel panic).
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pf, err := pidFile(cmd.Process.Pid) // before Wait can reap it
	if err == nil {
		err = atomicWrite(filepath.Join(dir, "pid"), pf, 0o644)
	}
	go func() {
		err := cmd.Wait()
		cancel(fmt.Errorf("qemu exited (%v): %s", err, lastLine(logPath)))
	}()
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("vm %s: %w", spec.Name, err)
	}
	vm := &VM{Name: spec.Name, SSHAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), HostKey: pub, PID: cmd.Process.Pid, Dir: dir}
	l.logf("vm %s: qemu (accel %s) booting, pid %d, console %s", spec.Name, qc.Accel, vm.PID, console)
	hk, _ := ParseHostKey(pub)
	if err := WaitSSH(wctx, vm.SSHAddr, signer, hk, l.cfg.BootTimeout); err != nil {
		if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		l.StopVM(context.WithoutCancel(ctx), vm)
		return nil, fmt.Errorf("vm %s: %w (console log: %s)", spec.Name, err, console)
	}
	l.logf("vm %s: ssh ready at %s after %.1fs", spec.Name, vm.SSHAddr, time.Since(start).Seconds())
	return vm, nil
}

// StopVM kills the VM's qemu and removes its disk.
func (l *Lab) StopVM(ctx context.Context, vm *VM) error {
	if err := l.stopVMDir(ctx, vm.Dir); err != nil {
		return fmt.Errorf("vm %s: %w", vm.Name, err)
	}
	return nil
}

func (l *Lab) stopVMDir(ctx context.Context, dir string) error {
	pidPath := filepath.Join(dir, "pid")
	if pid := alive(pidPath); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 50 && alive(pidPath) > 0; i++ {
			if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	if err := l.removeTree(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// DialVM opens an SSH connection to the VM, checking its pinned host key.
func (l *Lab) DialVM(ctx context.Context, vm *VM) (*ssh.Client, error) {
	signer, err := l.Signer()
	if err != nil {
		return nil, err
	}
	hk, err := ParseHostKey(vm.HostKey)
	if err != nil {
		return nil, err
	}
	return Dial(ctx, vm.SSHAddr, signer, hk)
}

// freePort is a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLine is the last non-empty line of a log file.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
