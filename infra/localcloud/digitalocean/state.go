package digitalocean

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// state is everything the server keeps: what the state file holds. It
// never holds a droplet's user data (the host key is in it).
type state struct {
	Version   int                  `json:"version"`
	NextID    int                  `json:"next_id"`
	Droplets  map[int]*droplet     `json:"droplets"`
	Actions   map[int]*action      `json:"actions"`
	Tags      map[string]bool      `json:"tags"` // canonical names
	Firewalls map[string]*firewall `json:"firewalls"`
}

const stateVersion = 1

func newState() state {
	return state{
		Version: stateVersion, NextID: 3164400,
		Droplets: map[int]*droplet{}, Actions: map[int]*action{},
		Tags: map[string]bool{}, Firewalls: map[string]*firewall{},
	}
}

func (st *state) load(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("digitalocean local cloud state %s: %w", path, err)
	}
	loaded := newState()
	if err := json.Unmarshal(data, &loaded); err != nil {
		return fmt.Errorf("digitalocean local cloud state %s: not the server's JSON: %v", path, err)
	}
	if loaded.Version != stateVersion {
		return fmt.Errorf("digitalocean local cloud state %s: version %d, want %d", path, loaded.Version, stateVersion)
	}
	for _, m := range []bool{loaded.Droplets == nil, loaded.Actions == nil, loaded.Tags == nil, loaded.Firewalls == nil} {
		if m {
			return fmt.Errorf("digitalocean local cloud state %s: droplets, actions, tags or firewalls missing", path)
		}
	}
	*st = loaded
	return nil
}

func (st *state) newID() int {
	st.NextID++
	return st.NextID
}

const (
	statusNew    = "new"
	statusActive = "active"
)

// droplet is a droplet's record.
type droplet struct {
	ID       int       `json:"id"`
	Name     string    `json:"name"`
	Size     string    `json:"size"`
	Region   string    `json:"region"`
	Image    any       `json:"image"` // the slug or id the request gave
	Tags     []string  `json:"tags"`
	Status   string    `json:"status"` // new until its machine is up, then active
	IPv4     string    `json:"ipv4,omitempty"`
	Created  time.Time `json:"created"`
	Deleting bool      `json:"deleting,omitempty"` // deleted; its machine is being removed
	// NoIPv4: the faults file said the droplet gets no address; IPv4 is
	// its machine's, not shown.
	NoIPv4 bool `json:"no_ipv4,omitempty"`
}

// action is an action's record.
type action struct {
	ID           int        `json:"id"`
	Status       string     `json:"status"` // in-progress, completed, errored
	Type         string     `json:"type"`
	Started      time.Time  `json:"started"`
	Completed    *time.Time `json:"completed,omitempty"`
	ResourceID   int        `json:"resource_id"`
	ResourceType string     `json:"resource_type"`
	Region       string     `json:"region"`
}

// firewall is a firewall's record, rules as the API shows them.
type firewall struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Created    time.Time `json:"created"`
	Inbound    []rule    `json:"inbound_rules"`
	Outbound   []rule    `json:"outbound_rules"`
	DropletIDs []int     `json:"droplet_ids"`
	Tags       []string  `json:"tags"`
}

// rule is a firewall rule; Target is its sources or destinations.
type rule struct {
	Protocol string `json:"protocol"`
	Ports    string `json:"ports"`
	Target   target `json:"target"`
}

type target struct {
	Addresses        []string `json:"addresses,omitempty"`
	DropletIDs       []int    `json:"droplet_ids,omitempty"`
	LoadBalancerUIDs []string `json:"load_balancer_uids,omitempty"`
	KubernetesIDs    []string `json:"kubernetes_ids,omitempty"`
	Tags             []string `json:"tags,omitempty"`
}
