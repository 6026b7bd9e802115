package inventories

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bytes is a size in bytes. In YAML and on the command line it is written
// with a unit: decimal (kB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB);
// a bare number means bytes.
type Bytes int64

// unit is a suffix and the multiplier it stands for.
type unit struct {
	suffix string
	mult   float64
}

var byteUnits = []unit{
	// Longest suffixes first so that "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseBytes reads a size such as "1.3MB", "64GiB" or "20TB".
func ParseBytes(s string) (Bytes, error) {
	v, err := parseWithUnit(s, byteUnits)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w (want a number with a unit such as 512MiB, 1.3MB or 20TB)", s, err)
	}
	return Bytes(math.Round(v)), nil
}

// String writes the size with the largest decimal unit that keeps it readable.
func (b Bytes) String() string {
	return humanize(float64(b), 1000, []string{"B", "kB", "MB", "GB", "TB", "PB"})
}

// UnmarshalYAML reads a size written with a unit.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBytes(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MarshalYAML writes the size as text with a unit.
func (b Bytes) MarshalYAML() (any, error) { return b.String(), nil }

// BitRate is a rate in bits per second, written "48kbit", "1Gbit" or
// "100Mbit" (an optional "/s" is accepted).
type BitRate int64

var bitUnits = []unit{
	{"kbit", 1e3}, {"Kbit", 1e3}, {"Mbit", 1e6}, {"Gbit", 1e9}, {"Tbit", 1e12}, {"bit", 1},
}

// ParseBitRate reads a rate such as "48kbit", "1Gbit" or "10Gbit/s".
func ParseBitRate(s string) (BitRate, error) {
	v, err := parseWithUnit(strings.TrimSuffix(s, "/s"), bitUnits)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w (want a number with a unit such as 48kbit or 1Gbit)", s, err)
	}
	return BitRate(math.Round(v)), nil
}

// String writes the rate with the largest unit that keeps it readable.
func (r BitRate) String() string {
	return humanize(float64(r), 1000, []string{"bit", "kbit", "Mbit", "Gbit", "Tbit"}) + "/s"
}

// UnmarshalYAML reads a rate written with a unit.
func (r *BitRate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBitRate(n.Value)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalYAML writes the rate as text with a unit.
func (r BitRate) MarshalYAML() (any, error) { return strings.TrimSuffix(r.String(), "/s"), nil }

// BytesPerSecond is the rate in bytes per second.
func (r BitRate) BytesPerSecond() float64 { return float64(r) / 8 }

// parseWithUnit splits s into a non-negative number and a unit suffix from
// units; a bare number has multiplier 1.
func parseWithUnit(s string, units []unit) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty")
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a number")
	}
	if f < 0 {
		return 0, fmt.Errorf("negative")
	}
	return f * mult, nil
}

// humanize writes v in the largest of units (each base times the one
// before) that leaves it at least 1, to two decimals at most.
func humanize(v, base float64, units []string) string {
	i := 0
	for v >= base && i < len(units)-1 {
		v /= base
		i++
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + units[i]
}

// Processes is the number of relay processes on a box; zero means auto,
// one per core. In YAML it is a positive integer or the word auto.
type Processes int

// ParseProcesses reads "auto" or a positive integer.
func ParseProcesses(s string) (Processes, error) {
	if s == "auto" || s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > MaxProcesses {
		return 0, fmt.Errorf("processes %q: want auto or an integer from 1 to %d", s, MaxProcesses)
	}
	return Processes(n), nil
}

// For returns the process count on a box with the given cores.
func (p Processes) For(cores int) int {
	if p == 0 {
		return cores
	}
	return int(p)
}

// String writes "auto" or the count.
func (p Processes) String() string {
	if p == 0 {
		return "auto"
	}
	return strconv.Itoa(int(p))
}

// UnmarshalYAML reads "auto" or a positive integer.
func (p *Processes) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseProcesses(n.Value)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalYAML writes "auto" or the count.
func (p Processes) MarshalYAML() (any, error) {
	if p == 0 {
		return "auto", nil
	}
	return int(p), nil
}

// IEC writes the size in binary units (KiB, MiB, GiB, TiB), as RAM is sold.
func (b Bytes) IEC() string {
	return humanize(float64(b), 1024, []string{"B", "KiB", "MiB", "GiB", "TiB"})
}
