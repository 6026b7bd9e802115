// Package archtest holds relayfleet's architecture rules as tests: the
// one-way import rule of README.md's Layout (cmd -> monitoring -> infra -> provision -> {units,
// sysctl, inventories}; cmd/relay -> relay; relay imports nothing else of
// this module, and only cmd imports it, but for the shared leaves in
// RelayShared; nothing imports cmd) and a package comment on every package.
package archtest

// Module is this module's import path.
const Module = "github.com/relayfleet/relayfleet"
