//go:build e2e

package e2e

import (
	"os"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/provision"
)

// labImages is the lab image cache the tests share: $RELAYFLEET_LAB_IMAGES,
// else the default lab's (as cmd/fleet's lab tests find it).
func labImages() string {
	if d := os.Getenv("RELAYFLEET_LAB_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/relayfleet/lab/images"
}

// boxJSON is one box of fleet status --json, as the binary writes it.
type boxJSON struct {
	Host  string `json:"host"`
	Error string `json:"error,omitempty"`
	provision.BoxStatus
}

// hostJSONEntry is one host of fleet hosts --json, as the binary writes
// it.
type hostJSONEntry struct {
	fleethosts.Host
	Release string `json:"release,omitempty"`
	Error   string `json:"error,omitempty"`
}
