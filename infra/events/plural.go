package events

import "github.com/relayfleet/relayfleet/inventories/capacity"

// plural writes a count with the noun that fits it: 1 box, 2 boxes.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return capacity.Count(n) + " " + many
}
