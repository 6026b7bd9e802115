package inventories

// Ranges of the numbers the inventories, the catalogue and fleet plan take.
// Each is far above any real fleet and far enough below the limits of the
// planner's arithmetic (int64 bytes, float64 prices) that a plan answers
// within a second whatever the input.
const (
	// MaxCores is the most cores a box may have.
	MaxCores = 1024
	// MaxProcesses is the most relay processes a box may run.
	MaxProcesses = 1024
	// MaxRAM is the most RAM a box may have: 64 TiB.
	MaxRAM = Bytes(64 << 40)
	// MaxUplink is the fastest uplink a box may have: 1 Tbit/s.
	MaxUplink = BitRate(1_000_000_000_000)
	// MaxBoxes is the most boxes a group, a pool or a plan may have.
	MaxBoxes = 100_000
	// MaxListeners is the largest audience fleet plan plans for.
	MaxListeners = 100_000_000
	// MaxPrice is the highest price of a box (per hour, per month or
	// setup) or of egress, in its currency.
	MaxPrice = 1_000_000
	// MaxEventHours is the longest event: a year.
	MaxEventHours = 8760
)
