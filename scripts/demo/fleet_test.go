package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

// TestDemoFleetHasOrigins: the demo's fleet file loads with an origin
// group of two (the fleet makes the origins; no hand-started one) and no
// static origin URL.
func TestDemoFleetHasOrigins(t *testing.T) {
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "demo.yaml")
	if err := os.WriteFile(path, []byte(demoFleet()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := inventories.LoadFleet(path, cat)
	if err != nil {
		t.Fatalf("demo fleet: %v", err)
	}
	// The load generators run on the host: its lab bridge address.
	if got := f.Access.UncappedAddresses(); got != "10.231.87.1/32" {
		t.Errorf("demo fleet: uncapped %q, want the lab bridge's address", got)
	}
	if f.Origins == nil || f.Origins.Count != 2 || len(f.Origin) != 0 {
		t.Fatalf("demo fleet: origins %+v, static origin %v; want 2 origin boxes and no static origin", f.Origins, f.Origin)
	}
}
