// Package cpupin runs relay/bench's relay on one CPU alone and the load
// on the others, as the fleet runs a relay process (Linux; elsewhere it
// pins nothing).
package cpupin
