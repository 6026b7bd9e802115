// Package pricing reads live prices and included traffic from the provider
// APIs that publish them (Hetzner Cloud through hcloud-go, DigitalOcean
// through godo) and compares them with the shipped catalogue,
// providers.yaml.
//
// FetchHcloud and FetchDigitalOcean turn each API's answer into [Live]
// rows, one per shape (and, for Hetzner Cloud, per location). [Compare]
// matches them to the catalogue by provider, shape name and region and
// lists every [Difference]: a price, allowance, overage price, core count
// or memory size that moved, a shape the API sells that the catalogue
// lacks, and a catalogue row the API no longer lists.
//
// API tokens go into the Authorization header only; they are never logged
// and never part of an error.
package pricing
