package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

// TestDemoFleetPinsTheOrigin: the demo's fleet file loads with the
// origin's key pin, which the loader requires for an http:// origin off
// loopback.
func TestDemoFleetPinsTheOrigin(t *testing.T) {
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	load := func(origin string) error {
		path := filepath.Join(t.TempDir(), "demo.yaml")
		if err := os.WriteFile(path, []byte(demoFleet(origin)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := inventories.LoadFleet(path, cat)
		return err
	}
	pinned := "http://" + originIP + ":4443/#spki=" + strings.Repeat("ab", 32)
	if err := load(pinned); err != nil {
		t.Fatalf("demo fleet with a pinned origin: %v", err)
	}
	if err := load("http://" + originIP + ":4443/"); err == nil {
		t.Fatal("demo fleet with an unpinned http:// origin loaded")
	}
}
