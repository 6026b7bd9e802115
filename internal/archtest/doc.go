// Package archtest holds relayfleet's architecture rules as tests: the
// one-way import rule of README.md's Layout (cmd -> monitoring -> infra -> provision -> {units,
// sysctl, inventories}; cmd/relay -> relay; relay imports nothing else of
// this module but the leaves of internal/ (packages that import nothing of
// it: cli, version, testutil), and only cmd imports relay, but for the
// shared packages in RelayShared; nothing imports cmd), a package
// comment on every package, and the docs' links: every relative link in
// README.md and docs/*.md points to a file (and heading) that exists, and
// README.md stays under MaxReadmeLines (CheckDocs).
package archtest

// Module is this module's import path.
const Module = "github.com/relayfleet/relayfleet"
