// Package program is relayfleet's Pulumi program: one function from a
// fleet inventory to relayfleet resources (a Box and a Host per steady
// box, a Firewall per cloud group) and stack outputs carrying the host
// list that provision and the router need.
//
// The same function runs two ways: from infra/pulumi's main.go under an
// official Pulumi install (`pulumi up` there), and inline through the
// Automation API (package infra/program's Up, Preview and Destroy, which
// `fleet up | preview | destroy` call) with only the Pulumi CLI, a file
// backend and passphrase secrets. Side effects belong to the provider's
// resources; nothing here connects anywhere.
//
// The resources' inputs are the provider's own args structs
// (provider.BoxArgs, HostArgs, FirewallArgs), turned into inputs by their
// pulumi tags (argsInput): a new input is a field there, not a list here.
//
// The bodies of the fleet commands that work on the fleet's stack live
// here too, taking their flags as plain options: Settings (the stack
// flags, checked and loaded), FleetUp, FleetPreview and FleetDestroy
// (with Confirm before boxes that serve listeners go), SetSecret,
// MintToken, ShowAuthKeys, ExportAuthKeys and RotateAuth.
package program
