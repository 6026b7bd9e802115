package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// nameRE is what a box name may look like: a short DNS label (11
// characters: the lab once named the host side of a box's veth pair
// vb-NAME, and the fleet's lab box names are cut to fit).
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,10}$`)

// ValidName reports whether name can be a box name.
func ValidName(name string) error {
	if !nameRE.MatchString(name) || strings.HasSuffix(name, "-") {
		return fmt.Errorf("box name %q: want 1-11 characters a-z, 0-9 and '-', starting with a letter", name)
	}
	return nil
}

// renderNetwork is the box's systemd-networkd file for its veth end (host0):
// a static address, no gateway, no IPv6 autoconfiguration.
func renderNetwork(addr netip.Addr, subnet netip.Prefix) string {
	return fmt.Sprintf(`# relayfleet lab box: static address on the lab bridge, no gateway.
[Match]
Name=host0

[Network]
Address=%s/%d
LinkLocalAddressing=no
IPv6AcceptRA=no
`, addr, subnet.Bits())
}

// renderHosts is the box's /etc/hosts.
func renderHosts(name string) string {
	return fmt.Sprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n", name)
}

// renderAuthorizedKeys joins keys one a line, dropping blanks and duplicates.
func renderAuthorizedKeys(keys []string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		b.WriteString(k)
		b.WriteByte('\n')
	}
	return b.String()
}

// renderKnownHosts is a known_hosts file for the ssh command line client.
func renderKnownHosts(boxes []Box) string {
	var b strings.Builder
	for _, x := range boxes {
		if !x.Address.IsValid() || x.HostKey == "" {
			continue
		}
		fields := strings.Fields(x.HostKey)
		if len(fields) < 2 {
			continue
		}
		fmt.Fprintf(&b, "%s %s %s\n", x.Address, fields[0], fields[1])
	}
	return b.String()
}

// newMachineID is a random systemd machine-id (32 hex digits and a newline).
func newMachineID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "\n"
}

// firstBoxHost is the host number of the first box address in the subnet;
// the host's bridge takes host number 1.
const firstBoxHost = 11

// bridgeAddr is the host's address on the bridge: the subnet's first host.
func bridgeAddr(subnet netip.Prefix) netip.Addr {
	return subnet.Masked().Addr().Next()
}

// nextAddress returns the lowest free box address in subnet, starting at
// host number firstBoxHost and stopping before the broadcast address.
func nextAddress(subnet netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	subnet = subnet.Masked()
	if !subnet.Addr().Is4() || subnet.Bits() > 28 {
		return netip.Addr{}, fmt.Errorf("address: subnet %s: want an IPv4 prefix of /28 or wider", subnet)
	}
	a := subnet.Addr()
	for range firstBoxHost {
		a = a.Next()
	}
	for ; subnet.Contains(a); a = a.Next() {
		if !subnet.Contains(a.Next()) { // broadcast
			break
		}
		if !slices.Contains(used, a) {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("address: subnet %s is full", subnet)
}

// pickCPUs chooses n of the host's CPUs for a new box, spreading boxes: the
// CPUs that the fewest boxes use first, lowest number on a tie. load maps a
// CPU to the number of boxes pinned to it.
func pickCPUs(host []int, load map[int]int, n int) ([]int, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cpus: want at least 1 core, got %d", n)
	}
	if n > len(host) {
		return nil, fmt.Errorf("cpus: the shape wants %d cores, this host has %d", n, len(host))
	}
	c := slices.Clone(host)
	slices.SortStableFunc(c, func(a, b int) int {
		if load[a] != load[b] {
			return load[a] - load[b]
		}
		return a - b
	})
	c = c[:n]
	slices.Sort(c)
	return c, nil
}

// parseCPUList parses a cpuset list such as "0-3,6".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for i := a; i <= b; i++ {
			if !slices.Contains(cpus, i) {
				cpus = append(cpus, i)
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// formatCPUList is the cpuset list form of cpus, ranges collapsed.
func formatCPUList(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var parts []string
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", c[i], c[j]))
		} else {
			parts = append(parts, strconv.Itoa(c[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// matchLabels reports whether have carries every label in want.
func matchLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
