// Package backend is the small interface every relayfleet box backend
// implements (lab, hcloud, digitalocean) and the relayfleet provider calls:
// Create, Get, List by label and Delete, all idempotent (docs/operations.md,
// "fleet up, preview, destroy").
//
// It also holds what the cloud backends share: the cloud-init document that
// installs the host key relayfleet generated for a box (docs/security.md;
// docs/testing.md, "Lab boxes"),
// the label rules every backend accepts, the firewall rules of a fleet, and
// an HTTP transport that retries rate-limited and failed API calls with
// jittered, bounded exponential backoff.
package backend
