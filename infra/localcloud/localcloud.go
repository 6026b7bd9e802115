// Package localcloud serves cloud providers' APIs (Hetzner Cloud,
// DigitalOcean) on this machine, backed by lab boxes: creating a server
// boots a box of the matching shape and applies the request's cloud-init
// user data inside it. Pointed at it (HCLOUD_ENDPOINT,
// DIGITALOCEAN_API_URL), the real fleet up, status, rollout, events and
// destroy run end to end, and users rehearse a cloud fleet locally.
//
// The API packages (localcloud/hcloud, localcloud/digitalocean) keep their
// own records (servers, actions, firewalls, keys) and call Machines to boot
// and delete the boxes behind them.
package localcloud

import (
	"context"
	"net/netip"
	"time"

	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
)

// MachineSpec is what a create-server request asks for, in terms that do
// not depend on the provider.
type MachineSpec struct {
	Name     string            // the server's name (unique among live servers)
	Cores    int               // from the provider's server type / size
	RAM      int64             // bytes, from the provider's server type / size
	Labels   map[string]string // the request's labels (DigitalOcean: parsed "key:value" tags)
	UserData []byte            // cloud-init user data as sent; applied inside the box
}

// Machine is one booted box behind a server.
type Machine struct {
	Name    string     // MachineSpec.Name
	IPv4    netip.Addr // reported as the server's public IPv4
	Cores   int
	RAM     int64
	Created time.Time
}

// Machines boots and removes the boxes behind a local cloud. The lab
// implementation (LabMachines) boots lab boxes; tests of the API packages
// use an in-memory one.
type Machines interface {
	// Create boots the box, applies the spec's cloud-init user data in it
	// (host key, authorized keys, hostname: ParseCloudInit's subset) and
	// returns once its sshd answers with the user data's host key.
	Create(ctx context.Context, s MachineSpec) (Machine, error)
	// Delete removes the box; a missing one is not an error.
	Delete(ctx context.Context, name string) error
}

// Config is what an API server (localcloud/hcloud.New,
// localcloud/digitalocean.New) starts with; both have the signature
//
//	func New(m localcloud.Machines, cfg localcloud.Config) (*Server, error)
//
// and *Server is an http.Handler serving the provider's API at "/" (the
// caller mounts it under the provider's base path: /v1 for hcloud, /v2
// for DigitalOcean).
type Config struct {
	// StateFile keeps the server's records (servers, actions, firewalls,
	// keys) across restarts: JSON, written atomically, mode 0600. Empty
	// keeps them in memory only.
	StateFile string
	// Token is the bearer token every request must carry; others get the
	// provider's 401 error body.
	Token string
	// Logf, when set, gets one line per request (method, path, status):
	// never the token or the user data.
	Logf func(format string, args ...any)
	// Faults, when set, are what the server gets wrong (package faults):
	// creates refused for capacity, 429s, creates that never finish,
	// servers without an address. Nil: none.
	Faults *faults.File
	// RequestsFile, when set, gets the counts of the requests the server
	// answered (RequestCounts), written after each one (Requests).
	RequestsFile string
}
