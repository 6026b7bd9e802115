// Package capacity is relayfleet's capacity planner: how many listeners a
// box carries and which term limits it, how many boxes a target needs,
// what they cost, and what the providers' egress terms do at that load.
//
// It is pure arithmetic over the inventories' data; nothing here touches a
// network, and only WritePlan (fleet plan's body) reads the files it is
// given.
package capacity

import (
	"github.com/relayfleet/relayfleet/internal/text"
	"math"

	"github.com/relayfleet/relayfleet/inventories"
)

// Term names one term of the capacity formula.
type Term string

// The terms of the capacity formula, in the order ties are broken.
const (
	TermCPU       Term = "cpu"       // cores x listeners per core
	TermSocket    Term = "socket"    // processes x listeners per socket
	TermMemory    Term = "memory"    // RAM / RAM per listener / 2
	TermBandwidth Term = "bandwidth" // uplink x headroom / bitrate per listener
)

// Box is what capacity depends on: a box's size and its process count.
type Box struct {
	Cores     int
	RAM       inventories.Bytes
	Processes int
	Uplink    inventories.BitRate
}

// Terms holds each term's listener count.
type Terms struct {
	CPU       int `json:"cpu"`
	Socket    int `json:"socket"`
	Memory    int `json:"memory"`
	Bandwidth int `json:"bandwidth"`
}

// BoxCapacity is a box's capacity, the term that limits it and every term.
type BoxCapacity struct {
	Capacity  int   `json:"capacity"`
	LimitedBy Term  `json:"limited_by"`
	Terms     Terms `json:"terms"`
}

// PerBox evaluates the capacity formula:
//
//	min(cores x L_core, processes x L_socket, RAM / RAM_per_listener / 2,
//	    uplink x headroom / bitrate)
//
// naming the smallest term (ties go to the earlier term in that order).
func PerBox(b Box, c *inventories.Calibration) BoxCapacity {
	t := Terms{
		CPU:       floor(float64(b.Cores) * c.ListenersPerCore),
		Socket:    floor(float64(b.Processes) * c.ListenersPerSocket),
		Memory:    floor(float64(b.RAM) / float64(c.RAMPerListener) / 2),
		Bandwidth: floor(float64(b.Uplink) * c.UplinkHeadroom / float64(c.BitratePerListener)),
	}
	bc := BoxCapacity{Capacity: t.CPU, LimitedBy: TermCPU, Terms: t}
	for _, x := range []struct {
		term Term
		n    int
	}{{TermSocket, t.Socket}, {TermMemory, t.Memory}, {TermBandwidth, t.Bandwidth}} {
		if x.n < bc.Capacity {
			bc.Capacity, bc.LimitedBy = x.n, x.term
		}
	}
	return bc
}

// floor rounds down, with a small tolerance so that 12 x 900 is 10800 and
// not 10799 after floating-point error.
func floor(x float64) int {
	return int(math.Floor(x + 1e-9))
}

// EgressPerListenerHour is the bytes one listener pulls in an hour.
func EgressPerListenerHour(c *inventories.Calibration) inventories.Bytes {
	return inventories.Bytes(math.Round(c.BitratePerListener.BytesPerSecond() * 3600))
}

// Plural writes a count, with comma separators, and the noun that fits
// it: 1 box, 2 boxes, 10,000 listeners.
var Plural = text.Plural

// Count writes a listener count with comma separators: 100,000.
var Count = text.Count

// roundMoney keeps four decimals: enough for hourly prices of a cent.
func roundMoney(v float64) float64 { return math.Round(v*1e4) / 1e4 }
