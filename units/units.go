// Package units renders relayfleet's systemd units from a box's layout:
// the relay@.service template, one drop-in per relay process (its port and
// CPU), and relay.target grouping them. It is pure: bytes in, bytes out,
// built with go-systemd's unit serializer.
//
// Each relay process runs under its own memory ceiling (MemoryMax) with
// Restart=always, so a process that runs away is killed and restarted
// alone while its siblings keep serving: the story's isolation fix.
package units

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
)

// Names of the rendered units.
const (
	TemplateName = "relay@.service"
	TargetName   = "relay.target"
)

// MinMemory is the smallest per-process ceiling worth running a relay in.
const MinMemory = 32 << 20

// Layout is what the units depend on.
type Layout struct {
	Cores     int
	RAM       int64 // bytes
	Processes int   // 0 = one per core
	BasePort  int
	// Reserve is RAM kept for the system (sshd, journald, the kernel);
	// 0 means the default, 256 MiB or an eighth of RAM if smaller.
	Reserve int64
	// Binary is the relay binary's path on the box.
	Binary string
	// CPUs are the CPU ids the box may use (from its cpuset); process i is
	// pinned to CPUs[i % len]. Empty means 0..Cores-1.
	CPUs []int
	// Upstream are relay URLs every process pulls broadcasts from that are
	// not published to it (relay serve --upstream): the fleet's origin.
	// A URL may end in #spki=HEX, the origin's key pin, which goes into
	// ExecStart with it.
	Upstream []string
	// Auth makes every process verify tokens with the fleet's relay key
	// file (public keys and the link key, never a key that signs tokens
	// to publish), which systemd hands it as the credential CredentialName loaded from
	// CredentialFile (root-only on the box): relay serve --auth-key
	// %d/relay-auth. With Auth, publishing always needs a token.
	Auth bool
	// PublicListen are broadcast path prefixes tokenless sessions may
	// subscribe under (relay serve --public-listen); they need Auth.
	PublicListen []string
	// MaxSessionsPerAddress caps each process's sessions from one source
	// address (relay serve --max-sessions-per-address); 0: no cap.
	MaxSessionsPerAddress int
	// UncappedAddresses are sources whose sessions no per-address cap
	// counts (relay serve --uncapped-addresses): the fleet's own load
	// generators, as CIDR prefixes, comma-separated; "" for none.
	UncappedAddresses string
	// TLSKey makes every process serve self-signed certificates for the
	// box's TLS key, made by the fleet, which systemd hands it as the
	// credential TLSKeyName loaded from TLSKeyFile (root-only on the
	// box): relay serve --tls-key %d/relay-tls-key. The router pins the
	// key's SPKI when it polls /stats.
	TLSKey bool
}

// The fleet's relay auth key file on a box and the systemd credential
// that hands it to each relay process. Only root reads CredentialDir;
// the relay, a DynamicUser, sees the key only in its own credentials
// directory ($CREDENTIALS_DIRECTORY, %d in the unit).
const (
	CredentialDir  = "/etc/relayfleet/credentials"
	CredentialName = "relay-auth"
	CredentialFile = CredentialDir + "/" + CredentialName
)

// RevocationFile is the fleet's revocation list on a box (fleet token
// revoke writes it over SSH; relay serve --revocation-file reads it every
// second): not secret, it names token ids and path prefixes, so it is
// world-readable and read in place, not a credential copied at start.
const RevocationFile = "/etc/relayfleet/revoked"

// The box's stateless reset secret (32 random bytes made on the box by
// converge, root's alone, never copied off it) and the credential that
// hands it to every relay process: relay serve --stateless-reset-secret
// %d/reset-secret. Each process derives its QUIC stateless reset key from
// it and its port, so a process restarted on the same port resets the
// connections its predecessor left, and their listeners reconnect at once
// instead of after the idle timeout.
const (
	ResetSecretName = "reset-secret"
	ResetSecretFile = CredentialDir + "/" + ResetSecretName
)

// The box's relay TLS key (an ECDSA P-256 key made by the fleet, kept
// in its stack as a secret, its SPKI pin in the router's relays file)
// and the credential that hands it to every relay process.
const (
	TLSKeyName = "relay-tls-key"
	TLSKeyFile = CredentialDir + "/" + TLSKeyName
)

// MemoryMax returns the per-process ceiling, (RAM - reserve) / processes,
// and MemoryHigh, the throttling point below it (90%).
func (l Layout) MemoryMax() (max, high int64) {
	n := int64(l.processes())
	free := l.RAM - l.reserve()
	if n <= 0 || free <= 0 {
		return 0, 0
	}
	max = free / n
	return max, max / 10 * 9
}

func (l Layout) processes() int {
	if l.Processes == 0 {
		return l.Cores
	}
	return l.Processes
}

// cpu is the CPU process i is pinned to.
func (l Layout) cpu(i int) int {
	if len(l.CPUs) > 0 {
		return l.CPUs[i%len(l.CPUs)]
	}
	return i % l.Cores
}

func (l Layout) reserve() int64 {
	if l.Reserve > 0 {
		return l.Reserve
	}
	return min(256<<20, l.RAM/8)
}

func (l Layout) validate() error {
	switch {
	case l.Cores <= 0:
		return errors.New("units: cores must be positive")
	case l.processes() <= 0:
		return errors.New("units: processes must be positive")
	case (l.RAM-l.reserve())/int64(l.processes()) < MinMemory:
		return fmt.Errorf("units: %d bytes of RAM less a %d byte reserve leave under %d MiB for each of %d processes", l.RAM, l.reserve(), MinMemory>>20, l.processes())
	case l.BasePort <= 0 || l.BasePort+l.processes()-1 > 65535:
		return fmt.Errorf("units: ports %d..%d are out of range", l.BasePort, l.BasePort+l.processes()-1)
	case !strings.HasPrefix(l.Binary, "/"):
		return fmt.Errorf("units: binary %q is not an absolute path", l.Binary)
	}
	for _, u := range l.Upstream {
		if u == "" || strings.ContainsAny(u, " \t\n\r,%\"'\\;$") {
			return fmt.Errorf("units: upstream %q: want a URL without spaces, commas, quotes or %%", u)
		}
		if err := checkUpstreamPin(u); err != nil {
			return err
		}
	}
	if len(l.PublicListen) > 0 && !l.Auth {
		return errors.New("units: public listen prefixes need the fleet's auth key")
	}
	if l.MaxSessionsPerAddress < 0 {
		return fmt.Errorf("units: max sessions per address %d: want 0 (no cap) or more", l.MaxSessionsPerAddress)
	}
	if l.UncappedAddresses != "" {
		for _, s := range strings.Split(l.UncappedAddresses, ",") {
			if _, err := netip.ParsePrefix(s); err != nil {
				return fmt.Errorf("units: uncapped address %q: want a CIDR prefix", s)
			}
		}
	}
	for _, p := range l.PublicListen {
		if err := CheckPathPrefix(p); err != nil {
			return fmt.Errorf("units: public listen prefix %q: %v", p, err)
		}
	}
	return nil
}

// File is one rendered unit file.
type File struct {
	Path string // on the box
	Data []byte
}

func opt(section, name, value string) *unit.UnitOption {
	return unit.NewUnitOption(section, name, value)
}

func render(path string, opts []*unit.UnitOption) (File, error) {
	for _, o := range opts {
		// Serialize writes values raw: a newline would inject directives.
		if strings.ContainsAny(o.Value, "\n\r") {
			return File{}, fmt.Errorf("units: %s: newline in %s=", path, o.Name)
		}
	}
	data, err := io.ReadAll(unit.Serialize(opts))
	return File{Path: path, Data: data}, err
}

// Render returns the template, one drop-in per process and the target.
func Render(l Layout) ([]File, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	max, high := l.MemoryMax()
	tmplOpts := []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet relay on port %i"),
		opt("Unit", "PartOf", TargetName),
		opt("Unit", "After", "network-online.target"),
		opt("Unit", "Wants", "network-online.target"),
		// Keep restarting a crash loop: a relay that cannot start should
		// keep trying, not give up after five attempts.
		opt("Unit", "StartLimitIntervalSec", "0"),
		opt("Service", "Type", "notify"),
		// Sessions per source address: the fleet file's
		// access.max_sessions_per_address (64 unless it says otherwise;
		// 0: no cap, for listeners behind one proxy or carrier NAT); the
		// fleet's own load generators (access.load_generators: fleet
		// loadtest, make demo) open thousands from one address and are
		// not counted.
		opt("Service", "ExecStart", l.Binary+" serve --listen [::]:%i --stateless-reset-secret %d/"+ResetSecretName+" --max-sessions-per-address "+strconv.Itoa(l.MaxSessionsPerAddress)+uncappedArg(l.UncappedAddresses)+upstreamArg(l.Upstream)+authArgs(l)+tlsKeyArg(l)),
		opt("Service", "Restart", "always"),
		opt("Service", "RestartSec", "1s"),
		// A hung process (stopped, deadlocked) is killed and restarted
		// within 5 s; the relay feeds the watchdog every 2.5 s while its
		// core answers.
		opt("Service", "WatchdogSec", "5s"),
		// Copied at start, like the auth key: a process sees the box's
		// reset secret only in its own credentials directory.
		opt("Service", "LoadCredential", ResetSecretName+":"+ResetSecretFile),
		opt("Service", "MemoryMax", strconv.FormatInt(max, 10)),
		opt("Service", "MemoryHigh", strconv.FormatInt(high, 10)),
		opt("Service", "LimitNOFILE", "1048576"),
		// Hardening: systemd-analyze security scores this unit (see
		// docs/units.md); the relay needs only its sockets, sd_notify's
		// AF_UNIX socket and a read-only view of its binary.
		opt("Service", "DynamicUser", "yes"),
		opt("Service", "NoNewPrivileges", "yes"),
		opt("Service", "ProtectSystem", "strict"),
		opt("Service", "ProtectHome", "yes"),
		opt("Service", "PrivateTmp", "yes"),
		opt("Service", "PrivateDevices", "yes"),
		opt("Service", "DevicePolicy", "closed"),
		opt("Service", "PrivateUsers", "yes"),
		opt("Service", "ProtectClock", "yes"),
		opt("Service", "ProtectHostname", "yes"),
		opt("Service", "ProtectKernelLogs", "yes"),
		opt("Service", "ProtectKernelModules", "yes"),
		opt("Service", "ProtectKernelTunables", "yes"),
		opt("Service", "ProtectControlGroups", "yes"),
		opt("Service", "ProtectProc", "invisible"),
		opt("Service", "ProcSubset", "pid"),
		opt("Service", "RestrictNamespaces", "yes"),
		opt("Service", "RestrictRealtime", "yes"),
		opt("Service", "RestrictSUIDSGID", "yes"),
		opt("Service", "LockPersonality", "yes"),
		opt("Service", "MemoryDenyWriteExecute", "yes"),
		opt("Service", "UMask", "0077"),
		opt("Service", "CapabilityBoundingSet", ""),
		opt("Service", "RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
		// The cloud's metadata service serves the box's user data, SSH
		// host key included, to any process that asks: not to a relay.
		opt("Service", "IPAddressDeny", "169.254.169.254"),
		opt("Service", "SystemCallArchitectures", "native"),
		opt("Service", "SystemCallFilter", "@system-service"),
		opt("Service", "SystemCallFilter", "~@privileged @resources"),
		// A refused call fails with EPERM instead of killing the relay (Go
		// tries setrlimit at start and copes with a refusal).
		opt("Service", "SystemCallErrorNumber", "EPERM"),
		opt("Install", "WantedBy", TargetName),
	}
	if l.Auth {
		// LoadCredential= copies the root-only key file into the
		// process's private credentials directory at start: a rotated key
		// takes effect when the process restarts.
		tmplOpts = insertAfter(tmplOpts, "WatchdogSec", opt("Service", "LoadCredential", CredentialName+":"+CredentialFile))
	}
	if l.TLSKey {
		tmplOpts = insertAfter(tmplOpts, "WatchdogSec", opt("Service", "LoadCredential", TLSKeyName+":"+TLSKeyFile))
	}
	tmpl, err := render("/etc/systemd/system/"+TemplateName, tmplOpts)
	if err != nil {
		return nil, err
	}
	files := []File{tmpl}
	var wants []string
	for i := range l.processes() {
		port := l.BasePort + i
		name := "relay@" + unit.UnitNameEscape(strconv.Itoa(port)) + ".service"
		wants = append(wants, name)
		f, err := render("/etc/systemd/system/"+name+".d/10-relayfleet.conf", []*unit.UnitOption{
			opt("Service", "CPUAffinity", strconv.Itoa(l.cpu(i))),
		})
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	target, err := render("/etc/systemd/system/"+TargetName, []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet relays, one per process"),
		opt("Unit", "Wants", strings.Join(wants, " ")),
		opt("Install", "WantedBy", "multi-user.target"),
	})
	if err != nil {
		return nil, err
	}
	return append(files, target), nil
}

// Router names and defaults.
const (
	RouterName      = "relay-router.service"
	RouterRelays    = "/etc/relayfleet/relays.json"
	DefaultRouterAt = "[::]:8080"
)

// Router renders the unit of the router that hands new listeners the relay
// process with the most headroom. It reloads its relays file on SIGHUP,
// which `systemctl reload` sends after the fleet tool rewrites the file.
func Router(binary, listen string) (File, error) {
	if !strings.HasPrefix(binary, "/") {
		return File{}, fmt.Errorf("units: binary %q is not an absolute path", binary)
	}
	if listen == "" {
		listen = DefaultRouterAt
	}
	return render("/etc/systemd/system/"+RouterName, []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet router: hands listeners the relay with the most headroom"),
		opt("Unit", "After", "network-online.target"),
		opt("Unit", "Wants", "network-online.target"),
		opt("Unit", "StartLimitIntervalSec", "0"),
		opt("Service", "ExecStart", binary+" router --listen "+listen+" --relays "+RouterRelays),
		opt("Service", "ExecReload", "/bin/kill -HUP $MAINPID"),
		opt("Service", "Restart", "always"),
		opt("Service", "RestartSec", "1s"),
		opt("Service", "DynamicUser", "yes"),
		opt("Service", "NoNewPrivileges", "yes"),
		opt("Service", "ProtectSystem", "strict"),
		opt("Service", "ProtectHome", "yes"),
		opt("Service", "PrivateTmp", "yes"),
		opt("Service", "PrivateDevices", "yes"),
		opt("Service", "ProtectKernelTunables", "yes"),
		opt("Service", "ProtectControlGroups", "yes"),
		opt("Service", "CapabilityBoundingSet", ""),
		opt("Service", "RestrictAddressFamilies", "AF_INET AF_INET6"),
		opt("Service", "SystemCallArchitectures", "native"),
		opt("Service", "SystemCallFilter", "@system-service"),
		opt("Install", "WantedBy", "multi-user.target"),
	})
}

// insertAfter returns opts with o inserted after the first option named
// name.
func insertAfter(opts []*unit.UnitOption, name string, o *unit.UnitOption) []*unit.UnitOption {
	out := make([]*unit.UnitOption, 0, len(opts)+1)
	done := false
	for _, x := range opts {
		out = append(out, x)
		if !done && x.Name == name {
			out, done = append(out, o), true
		}
	}
	return out
}

// authArgs are the relay's --auth-key (its credential),
// --revocation-file and --public-listen flags, or --no-auth without auth:
// the relay listens on every address, where it refuses to run without a
// key unless told.
func authArgs(l Layout) string {
	if !l.Auth {
		return " --no-auth"
	}
	s := " --auth-key %d/" + CredentialName + " --revocation-file " + RevocationFile
	if len(l.PublicListen) > 0 {
		s += " --public-listen " + strings.Join(l.PublicListen, ",")
	}
	return s
}

// tlsKeyArg is the relay's --tls-key flag (its credential), or nothing
// without the box's key.
func tlsKeyArg(l Layout) string {
	if !l.TLSKey {
		return ""
	}
	return " --tls-key %d/" + TLSKeyName
}

// CheckPathPrefix checks a broadcast path prefix handed to the relay on
// its command line: non-empty, at most 128 bytes of letters, digits and
// - _ . / (no spaces, commas, % or quotes a unit would misread), not
// starting with '/', no empty, "." or ".." segment.
func CheckPathPrefix(p string) error {
	if p == "" {
		return errors.New("empty; want a broadcast path prefix such as live/")
	}
	if len(p) > 128 {
		return fmt.Errorf("%d bytes long; want at most 128", len(p))
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/') {
			return fmt.Errorf("character %q; want letters, digits, '-', '_', '.' and '/'", r)
		}
	}
	if strings.HasPrefix(p, "/") {
		return errors.New("starts with '/'; broadcast paths are relative, as in live/")
	}
	segs := strings.Split(strings.TrimSuffix(p, "/"), "/")
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("segment %q; want no empty, '.' or '..' segment", seg)
		}
	}
	return nil
}

// upstreamArg is the relay's --upstream flag for the fleet's origin, or
// nothing without one.
func upstreamArg(urls []string) string {
	if len(urls) == 0 {
		return ""
	}
	return " --upstream " + strings.Join(urls, ",")
}

// checkUpstreamPin checks the #spki=HEX an upstream URL may end in.
func checkUpstreamPin(u string) error {
	i := strings.IndexByte(u, '#')
	if i < 0 {
		return nil
	}
	pin, ok := strings.CutPrefix(u[i+1:], "spki=")
	if d, err := hex.DecodeString(pin); !ok || err != nil || len(d) != sha256.Size {
		return fmt.Errorf("units: upstream %q: after # want spki= and 64 hex digits (the origin's key pin)", u)
	}
	return nil
}

// uncappedArg is relay serve's --uncapped-addresses for the fleet's load
// generators, or nothing.
func uncappedArg(prefixes string) string {
	if prefixes == "" {
		return ""
	}
	return " --uncapped-addresses " + prefixes
}
