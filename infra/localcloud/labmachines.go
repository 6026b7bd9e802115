package localcloud

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"maps"
	"net"
	"path"
	"runtime"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/lab"
)

// LabMachines is Machines over lab boxes (package infra/lab): Create boots
// a box of the spec's shape, scaled to this machine, applies the user
// data's cloud-init inside it over SSH (with the lab's admin key, which
// the user data's authorized keys then replace, as on a fresh cloud image)
// and returns once sshd answers with the user data's host key.
type LabMachines struct {
	Lab *lab.Lab
	// RAMScale multiplies the spec's RAM (0 means 1): a 4 GiB server type
	// at 0.25 boots a 1 GiB box. The result is at least MinRAM.
	RAMScale float64
	// MaxCores caps the box's cores; 0 means this machine's CPU count
	// (a box cannot have more cores than the machine).
	MaxCores int
	// SSHTimeout bounds the wait for sshd with the new host key; default
	// two minutes.
	SSHTimeout time.Duration
	// Logf, when set, gets progress lines (never the user data).
	Logf func(format string, args ...any)
}

// MinRAM is the least RAM LabMachines gives a box, whatever the scale.
const MinRAM = 256 << 20

// ServerLabel is the lab label that names the server a box is behind.
const ServerLabel = "localcloud-server"

var _ Machines = (*LabMachines)(nil)

// BoxName is the lab box behind the server called name: the name itself
// when it is a valid box name, else "lc-" and 8 hex digits of its hash
// (box names are at most 11 characters, server names 63).
func BoxName(name string) string {
	if lab.ValidName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "lc-" + hex.EncodeToString(sum[:4])
}

// Shape is the lab shape a spec boots with.
func (lm *LabMachines) Shape(s MachineSpec) lab.Shape {
	cores := s.Cores
	limit := lm.MaxCores
	if limit <= 0 {
		limit = runtime.NumCPU()
	}
	cores = max(1, min(cores, limit))
	scale := lm.RAMScale
	if scale <= 0 {
		scale = 1
	}
	ram := int64(float64(s.RAM) * scale)
	ram = max(MinRAM, ram&^(1<<20-1)) // whole MiB
	return lab.Shape{Cores: cores, RAM: ram}
}

func (lm *LabMachines) logf(format string, args ...any) {
	if lm.Logf != nil {
		lm.Logf(format, args...)
	}
}

// Create boots the box behind s. On any error it leaves no box behind.
func (lm *LabMachines) Create(ctx context.Context, s MachineSpec) (Machine, error) {
	fail := func(err error) (Machine, error) { return Machine{}, fmt.Errorf("machine %s: %w", s.Name, err) }
	ci, err := ParseCloudInit(s.UserData)
	if err != nil {
		return fail(err)
	}
	if len(ci.Ignored) > 0 {
		lm.logf("%s: cloud-config keys not applied by the local cloud: %s", s.Name, strings.Join(ci.Ignored, ", "))
	}
	want, err := ci.HostPublicKey()
	if err != nil {
		return fail(err)
	}
	name := BoxName(s.Name)
	if _, err := lm.Lab.Get(ctx, name); err == nil {
		return fail(fmt.Errorf("lab box %s exists already (delete it with fleet lab down --dir %s)", name, lm.Lab.Dir()))
	} else if !errors.Is(err, lab.ErrNotFound) {
		return fail(err)
	}
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ServerLabel] = s.Name
	shape := lm.Shape(s)
	box, err := lm.Lab.Create(ctx, lab.Spec{Name: name, Shape: shape, Labels: labels})
	if err != nil {
		// Create may have made the box before it failed.
		if derr := lm.Lab.Delete(context.WithoutCancel(ctx), name); derr != nil {
			err = fmt.Errorf("%w; deleting box %s failed too: %v", err, name, derr)
		}
		return fail(err)
	}
	if err := lm.apply(ctx, s.Name, name, ci, box, want); err != nil {
		if derr := lm.Lab.Delete(context.WithoutCancel(ctx), name); derr != nil {
			err = fmt.Errorf("%w; deleting box %s failed too: %v", err, name, derr)
		}
		return fail(err)
	}
	return Machine{Name: s.Name, IPv4: box.Address, Cores: shape.Cores, RAM: shape.RAM, Created: box.Created}, nil
}

// apply runs the cloud-init script in the box, then waits for sshd to
// answer with the wanted host key.
func (lm *LabMachines) apply(ctx context.Context, server, name string, ci CloudInit, box lab.Box, want ssh.PublicKey) error {
	script := CloudInitScript(ci, server)
	c, err := lm.Lab.Dial(ctx, name)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	err = lab.Run(ctx, c, "/bin/sh -s", strings.NewReader(script), &out, &out)
	c.Close()
	if err != nil {
		return fmt.Errorf("applying cloud-init: %v: %s", err, lastLines(out.String(), 3))
	}
	timeout := lm.SSHTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	if err := WaitHostKey(ctx, box.SSHAddr(), want, timeout); err != nil {
		return err
	}
	lm.logf("%s: box %s at %s runs with the user data's host key", server, name, box.Address)
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Delete removes the box behind the server called name.
func (lm *LabMachines) Delete(ctx context.Context, name string) error {
	return lm.Lab.Delete(ctx, BoxName(name))
}

// WaitHostKey waits until the sshd at addr answers with the host key want
// (any key when want is nil). Only the key exchange is done: no key is
// needed to log in.
func WaitHostKey(ctx context.Context, addr string, want ssh.PublicKey, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		got, err := hostKeyOf(ctx, addr, want)
		switch {
		case err != nil:
			last = err
		case want == nil || bytes.Equal(got.Marshal(), want.Marshal()):
			return nil
		default:
			last = fmt.Errorf("sshd answers with host key %s, want %s", ssh.FingerprintSHA256(got), ssh.FingerprintSHA256(want))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ssh %s: %v (waited %s)", addr, last, timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var errGotKey = errors.New("host key read")

// hostKeyOf does the key exchange with addr and returns the host key it
// offered (of want's type, when want is set).
func hostKeyOf(ctx context.Context, addr string, want ssh.PublicKey) (ssh.PublicKey, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := dctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	var got ssh.PublicKey
	cfg := &ssh.ClientConfig{
		User: "root",
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			got = key
			return errGotKey // stop here: the key is all we want
		},
	}
	if want != nil {
		cfg.HostKeyAlgorithms = []string{want.Type()}
	}
	_, _, _, err = ssh.NewClientConn(conn, addr, cfg)
	if got != nil {
		return got, nil
	}
	return nil, err
}

// rootRefusal is the prefix cloud-init gives root's keys when disable_root
// is true (Debian's default user is "debian").
const rootRefusal = `no-port-forwarding,no-agent-forwarding,no-X11-forwarding,command="echo 'Please login as the user \"debian\" rather than the user \"root\".';echo;sleep 10;exit 142" `

// CloudInitScript is the shell script that applies ci inside a box, in
// cloud-init's order: write_files, hostname, host keys (delete, write,
// generate), root's authorized keys (replacing the lab's admin key),
// ssh_pwauth, deferred write_files, then an sshd restart. server is the
// hostname when ci names none.
func CloudInitScript(ci CloudInit, server string) string {
	var b strings.Builder
	b.WriteString("set -eu\numask 022\n")
	write := func(p string, content []byte, mode uint32, owner string, appendTo bool) {
		fmt.Fprintf(&b, "mkdir -p %s\n", text.ShellQuote(path.Dir(p)))
		redirect := ">"
		if appendTo {
			redirect = ">>"
		}
		fmt.Fprintf(&b, "printf '%%s' %s | base64 -d %s %s\n", text.ShellQuote(base64.StdEncoding.EncodeToString(content)), redirect, text.ShellQuote(p))
		fmt.Fprintf(&b, "chmod %04o %s\nchown %s %s\n", mode, text.ShellQuote(p), text.ShellQuote(owner), text.ShellQuote(p))
	}
	for _, f := range ci.WriteFiles {
		if !f.Defer {
			write(f.Path, f.Content, uint32(f.Permissions), f.Owner, f.Append)
		}
	}
	host := server
	if ci.Hostname != "" {
		host = ci.Hostname
	}
	short, _, _ := strings.Cut(host, ".")
	fqdn := ci.FQDN
	if fqdn == "" {
		fqdn = host
	}
	write("/etc/hostname", []byte(short+"\n"), 0o644, "root:root", false)
	fmt.Fprintf(&b, "hostname %s\n", text.ShellQuote(short))
	fmt.Fprintf(&b, "sed -i '/^127.0.1.1[[:space:]]/d' /etc/hosts\nprintf '127.0.1.1 %%s %%s\\n' %s %s >> /etc/hosts\n", text.ShellQuote(fqdn), text.ShellQuote(short))
	if ci.SSHDeleteKeys {
		b.WriteString("rm -f /etc/ssh/ssh_host_*key*\n")
	}
	for _, t := range HostKeyTypes {
		base := "/etc/ssh/ssh_host_" + t + "_key"
		if k, ok := ci.SSHKeys[t+"_private"]; ok {
			write(base, []byte(strings.TrimRight(k, "\n")+"\n"), 0o600, "root:root", false)
		}
		if k, ok := ci.SSHKeys[t+"_public"]; ok {
			write(base+".pub", []byte(strings.TrimSpace(k)+"\n"), 0o644, "root:root", false)
		}
		if k, ok := ci.SSHKeys[t+"_certificate"]; ok {
			write(base+"-cert.pub", []byte(strings.TrimSpace(k)+"\n"), 0o644, "root:root", false)
		}
	}
	for _, t := range ci.SSHGenKeyTypes {
		base := "/etc/ssh/ssh_host_" + t + "_key"
		fmt.Fprintf(&b, "[ -e %s ] || ssh-keygen -q -t %s -N '' -f %s\n", base, t, base)
	}
	var keys strings.Builder
	for _, k := range ci.AuthorizedKeys {
		if ci.DisableRoot {
			keys.WriteString(rootRefusal)
		}
		keys.WriteString(k + "\n")
	}
	b.WriteString("mkdir -p /root/.ssh\nchmod 0700 /root/.ssh\n")
	write("/root/.ssh/authorized_keys", []byte(keys.String()), 0o600, "root:root", false)
	if ci.SSHPasswordAuth != nil {
		v := "no"
		if *ci.SSHPasswordAuth {
			v = "yes"
		}
		write("/etc/ssh/sshd_config.d/50-cloud-init.conf", []byte("PasswordAuthentication "+v+"\n"), 0o600, "root:root", false)
	}
	for _, f := range ci.WriteFiles {
		if f.Defer {
			write(f.Path, f.Content, uint32(f.Permissions), f.Owner, f.Append)
		}
	}
	// The session's own sshd child outlives the restart (KillMode=process).
	b.WriteString("sshd -t\nsystemctl restart ssh.service\n")
	return b.String()
}

// quote is s as one single-quoted shell word.
