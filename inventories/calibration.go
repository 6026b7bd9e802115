package inventories

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Calibration sources.
const (
	SourceStory    = "story"    // the numbers from the story, not measured here
	SourceBench    = "bench"    // measured on the bundled relay by make bench-relay
	SourceLoadtest = "loadtest" // written by fleet loadtest from a measured curve
)

// Named calibrations: the shipped files in calibrations/, which
// `fleet plan --calibration NAME` takes by name.
const (
	// CalibrationRelayfleet is measured on the bundled relay: the default.
	CalibrationRelayfleet = "relayfleet"
	// CalibrationStory is the story's relay, kept for comparison.
	CalibrationStory = "story"
	// DefaultCalibration is what fleet plan and fleet events use when no
	// calibration.yaml lies beside the inventory and none is named.
	DefaultCalibration = CalibrationRelayfleet
)

// CalibrationNames lists the shipped calibrations, the default first.
func CalibrationNames() []string {
	return []string{CalibrationRelayfleet, CalibrationStory}
}

// NamedCalibration is the path Load* functions accept for a shipped
// calibration, and false when name is not one.
func NamedCalibration(name string) (string, bool) {
	if !slices.Contains(CalibrationNames(), name) {
		return "", false
	}
	return Embedded(calibrationDir + "/" + name + ".yaml"), true
}

// calibrationDir holds the shipped calibrations.
const calibrationDir = "calibrations"

// CalibrationName is how a plan names the calibration read from path: the
// shipped name for a shipped file (the default for the shipped
// calibration.yaml), else the path.
func CalibrationName(path string) string {
	if path == Embedded(CalibrationFile) {
		return DefaultCalibration
	}
	for _, n := range CalibrationNames() {
		if p, _ := NamedCalibration(n); p == path {
			return n
		}
	}
	return path
}

// Calibration is calibration.yaml: the coefficients of the capacity
// formula. The shipped default (calibrations/relayfleet.yaml) is measured
// on the bundled relay; calibrations/story.yaml holds the story's numbers;
// `fleet loadtest` writes one measured on a box and says where.
type Calibration struct {
	Version int    `yaml:"version"`
	Source  string `yaml:"source"`
	// MeasuredOn describes the machine and relay build of a measurement.
	MeasuredOn string `yaml:"measured_on"`
	Date       string `yaml:"date"`
	// Command is the command that measured a bench calibration.
	Command string `yaml:"command"`
	// ListenersPerCore is the CPU ceiling per core (real-world RTT).
	ListenersPerCore float64 `yaml:"listeners_per_core"`
	// ListenersPerSocket is the drain ceiling of one relay process's UDP
	// socket.
	ListenersPerSocket float64 `yaml:"listeners_per_socket"`
	// RAMPerListener is resident memory per listener; the planner keeps
	// half the RAM free for disconnect storms.
	RAMPerListener Bytes `yaml:"ram_per_listener"`
	// BitratePerListener is the egress per listener on the wire, headers
	// included.
	BitratePerListener BitRate `yaml:"bitrate_per_listener"`
	// UplinkHeadroom is the fraction of a box's uplink the relay may fill.
	UplinkHeadroom float64 `yaml:"uplink_headroom"`
}

func (c *Calibration) validate() error {
	switch c.Source {
	case SourceStory, SourceBench, SourceLoadtest:
	default:
		return fieldErr("source", "want story, bench or loadtest, got %q", c.Source)
	}
	if c.Source != SourceStory && c.MeasuredOn == "" {
		return fieldErr("measured_on", "a %s calibration says which machine it was measured on", c.Source)
	}
	if c.Source == SourceBench && c.Command == "" {
		return fieldErr("command", "a bench calibration names the command that measured it")
	}
	switch {
	case !inRange(c.ListenersPerCore, MaxListenersPerCore):
		return fieldErr("listeners_per_core", "want a number of listeners above 0 and at most %d, got %v", MaxListenersPerCore, c.ListenersPerCore)
	case !inRange(c.ListenersPerSocket, MaxListenersPerSocket):
		return fieldErr("listeners_per_socket", "want a number of listeners above 0 and at most %d, got %v", MaxListenersPerSocket, c.ListenersPerSocket)
	case c.RAMPerListener < MinRAMPerListener || c.RAMPerListener > MaxRAMPerListener:
		return fieldErr("ram_per_listener", "want a size from %s to %s, got %s", MinRAMPerListener, MaxRAMPerListener, c.RAMPerListener)
	case c.BitratePerListener < MinBitratePerListener || c.BitratePerListener > MaxBitratePerListener:
		return fieldErr("bitrate_per_listener", "want a rate from %s to %s, got %s", MinBitratePerListener, MaxBitratePerListener, c.BitratePerListener)
	case !inRange(c.UplinkHeadroom, 1):
		return fieldErr("uplink_headroom", "want a fraction in (0, 1], got %v", c.UplinkHeadroom)
	}
	return nil
}

// Ranges of the calibration's coefficients: wide enough for any relay, and
// small enough that the planner's arithmetic stays in range.
const (
	MaxListenersPerCore   = 1_000_000
	MaxListenersPerSocket = 10_000_000
	MinRAMPerListener     = Bytes(1 << 10)
	MaxRAMPerListener     = Bytes(1 << 30)
	MinBitratePerListener = BitRate(1_000)
	MaxBitratePerListener = BitRate(100_000_000)
)

// inRange reports whether v is a number above 0 and at most hi.
func inRange(v, hi float64) bool {
	return v > 0 && v <= hi && !math.IsNaN(v)
}

// Describe says where the calibration comes from, on one line: its source,
// and for a measured one the command, date and machine.
func (c *Calibration) Describe() string {
	var parts []string
	switch c.Source {
	case SourceStory:
		parts = append(parts, "the story's relay, not measured here")
	case SourceBench:
		parts = append(parts, fmt.Sprintf("measured by %s", c.Command))
	case SourceLoadtest:
		parts = append(parts, "measured by fleet loadtest")
	}
	if c.Date != "" {
		parts = append(parts, c.Date)
	}
	if c.MeasuredOn != "" {
		parts = append(parts, "on "+c.MeasuredOn)
	}
	return strings.Join(parts, ", ")
}

// String summarises the coefficients on one line.
func (c *Calibration) String() string {
	return fmt.Sprintf("%g listeners/core, %g listeners/socket, %s RAM/listener, %s/listener, uplink headroom %g",
		c.ListenersPerCore, c.ListenersPerSocket, c.RAMPerListener, c.BitratePerListener, c.UplinkHeadroom)
}
