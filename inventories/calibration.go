package inventories

import "fmt"

// Calibration sources.
const (
	SourceStory    = "story"    // the numbers from the story, not measured here
	SourceLoadtest = "loadtest" // written by fleet loadtest from a measured curve
)

// Calibration is calibration.yaml: the coefficients of the capacity
// formula. The shipped file holds the story's numbers; `fleet loadtest`
// replaces them with measured ones and says where they were measured.
type Calibration struct {
	Version int    `yaml:"version"`
	Source  string `yaml:"source"`
	// MeasuredOn describes the machine and relay build of a loadtest.
	MeasuredOn string `yaml:"measured_on"`
	Date       string `yaml:"date"`
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
	case SourceStory, SourceLoadtest:
	default:
		return fieldErr("source", "want story or loadtest, got %q", c.Source)
	}
	if c.Source == SourceLoadtest && c.MeasuredOn == "" {
		return fieldErr("measured_on", "a loadtest calibration says which machine it was measured on")
	}
	switch {
	case c.ListenersPerCore <= 0:
		return fieldErr("listeners_per_core", "must be positive")
	case c.ListenersPerSocket <= 0:
		return fieldErr("listeners_per_socket", "must be positive")
	case c.RAMPerListener <= 0:
		return fieldErr("ram_per_listener", "must be positive")
	case c.BitratePerListener <= 0:
		return fieldErr("bitrate_per_listener", "must be positive")
	case c.UplinkHeadroom <= 0 || c.UplinkHeadroom > 1:
		return fieldErr("uplink_headroom", "want a fraction in (0, 1], got %v", c.UplinkHeadroom)
	}
	return nil
}

// String summarises the coefficients on one line.
func (c *Calibration) String() string {
	return fmt.Sprintf("%g listeners/core, %g listeners/socket, %s RAM/listener, %s/listener, uplink headroom %g",
		c.ListenersPerCore, c.ListenersPerSocket, c.RAMPerListener, c.BitratePerListener, c.UplinkHeadroom)
}
