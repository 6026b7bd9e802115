// Package sysctl holds relayfleet's kernel profiles as data: it renders a
// profile to an /etc/sysctl.d file, reads values back from /proc/sys, and
// compares desired, before and after values key by key.
//
// It is pure: callers bring the bytes (over SSH, or an fs.FS for tests).
// sysctl's exit codes are not trusted; the read-back is the truth.
package sysctl

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// MiB is 1 << 20 bytes.
const MiB = 1 << 20

// Setting is one kernel parameter and why relayfleet sets it.
type Setting struct {
	Key    string // dotted, as in net.core.rmem_max
	Value  string // as /proc/sys prints it (whitespace-normalised)
	Reason string
	// AtLeast makes Value a floor: a larger number already on the box
	// (an operator's own tuning) is left alone.
	AtLeast bool
}

// Satisfied says whether got meets the setting.
func (s Setting) Satisfied(got string) bool {
	if got == s.Value {
		return true
	}
	if !s.AtLeast {
		return false
	}
	g, err1 := strconv.ParseInt(got, 10, 64)
	w, err2 := strconv.ParseInt(s.Value, 10, 64)
	return err1 == nil && err2 == nil && g >= w
}

// Raised is the profile with each floor (AtLeast) raised to the value in
// current when that is a larger number: an operator's own, larger tuning
// is kept. Written to the profile's file and loaded with sysctl -p, it
// never lowers a key, neither now nor at the next boot. Other settings
// and keys without a readable number stay as they are.
func (p Profile) Raised(current map[string]string) Profile {
	out := p
	out.Settings = make([]Setting, len(p.Settings))
	for i, s := range p.Settings {
		if s.AtLeast {
			g, err1 := strconv.ParseInt(current[s.Key], 10, 64)
			w, err2 := strconv.ParseInt(s.Value, 10, 64)
			if err1 == nil && err2 == nil && g > w {
				s.Value = strconv.FormatInt(g, 10)
			}
		}
		out.Settings[i] = s
	}
	return out
}

// Profile is an ordered set of settings rendered to one file.
type Profile struct {
	Name     string
	File     string // where it goes on a box
	Settings []Setting
}

// Relay is the relay host profile. The buffer values are the story's fix:
// one UDP socket per relay process, and the kernel's 208 KiB default
// dropped 1.27 M packets at 4,000 listeners.
func Relay() Profile {
	buf := fmt.Sprint(16 * MiB)
	return Profile{
		Name: "relay",
		File: "/etc/sysctl.d/60-relay.conf",
		Settings: []Setting{
			{"net.core.rmem_default", buf, "every socket, the relay's one UDP socket included, starts with 16 MiB of receive buffer: each tick's ACKs from thousands of listeners arrive in one burst", true},
			{"net.core.wmem_default", buf, "the same for send buffers: one sendmsg per packet per listener", true},
			{"net.core.rmem_max", buf, "lets the relay (and quic-go, which wants 7 MiB) raise SO_RCVBUF without root", true},
			{"net.core.wmem_max", buf, "lets the relay raise SO_SNDBUF without root", true},
			{"net.core.netdev_max_backlog", "16384", "packets queued between the NIC and the stack when a core is busy; the default 1000 drops bursts", true},
		},
	}
}

// Render writes the profile as an /etc/sysctl.d file, each setting with
// its reason as a comment.
func (p Profile) Render() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: relayfleet %s profile. Written by relayfleet; edits are overwritten.\n", p.File, p.Name)
	for _, s := range p.Settings {
		if strings.ContainsAny(s.Key+s.Value+s.Reason, "\n\r") {
			return nil, fmt.Errorf("sysctl %q: newline in key, value or reason", s.Key)
		}
		if !validKey(s.Key) {
			return nil, fmt.Errorf("sysctl %q: not a sysctl key", s.Key)
		}
		fmt.Fprintf(&b, "\n# %s\n%s = %s\n", s.Reason, s.Key, s.Value)
	}
	return b.Bytes(), nil
}

func validKey(k string) bool {
	// A leading '-' is sysctl.d syntax (ignore a failure to set the key),
	// not part of a key: Parse drops it.
	if k == "" || strings.HasPrefix(k, ".") || strings.HasPrefix(k, "-") || strings.HasSuffix(k, ".") || strings.Contains(k, "..") {
		return false
	}
	for _, r := range k {
		if !(r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Parse reads an /etc/sysctl.d file into key -> value.
func Parse(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "-"), "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want KEY = VALUE, got %q", n, line)
		}
		out[strings.TrimSpace(k)] = normalise(v)
	}
	return out, sc.Err()
}

// normalise collapses whitespace, as /proc/sys prints tabs between fields.
func normalise(v string) string { return strings.Join(strings.Fields(v), " ") }

// ProcPath is the /proc/sys path of a key.
func ProcPath(key string) string { return path.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")) }

// Read reads the profile's keys from a /proc/sys tree (os.DirFS("/") on a
// box, or a test tree). A key that cannot be read is missing from the map,
// and its error is returned beside it, not instead of it.
func (p Profile) Read(fsys fs.FS) (map[string]string, []error) {
	out := map[string]string{}
	var errs []error
	for _, s := range p.Settings {
		data, err := fs.ReadFile(fsys, strings.TrimPrefix(ProcPath(s.Key), "/"))
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", s.Key, err))
			continue
		}
		out[s.Key] = normalise(string(data))
	}
	return out, errs
}

// Status is what happened to one setting.
type Status string

// Statuses of a setting after applying a profile.
const (
	Already    Status = "already"     // it had the value before
	Applied    Status = "applied"     // it has the value now, not before
	NotApplied Status = "not applied" // it does not have the value after applying (read-only here, as in a container)
)

// Result is one setting's outcome.
type Result struct {
	Key, Want, Before, After string
	Status                   Status
}

// Compare judges each setting from the values read before and after
// applying. A missing value counts as different.
func (p Profile) Compare(before, after map[string]string) []Result {
	rs := make([]Result, 0, len(p.Settings))
	for _, s := range p.Settings {
		r := Result{Key: s.Key, Want: s.Value, Before: before[s.Key], After: after[s.Key]}
		switch {
		case !s.Satisfied(r.After):
			r.Status = NotApplied
		case s.Satisfied(r.Before):
			r.Status = Already
		default:
			r.Status = Applied
		}
		rs = append(rs, r)
	}
	return rs
}
