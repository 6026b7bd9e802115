package releases

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/infra/outputstack"
)

// Project is the Pulumi project whose stacks hold the fleets' release
// histories (one stack per fleet, named after it), beside the fleet's own
// stacks in the same backend.
const Project = "relayfleet-releases"

// Keep is how many releases a History lists, and how many builds the
// backend keeps: the current one and the ones before it, for rollback.
const Keep = 5

// How a release became the fleet's.
const (
	// HowFirst: a fleet without a release took the build a command
	// was given (or found beside it).
	HowFirst = "first"
	// HowRollout: fleet rollout completed.
	HowRollout = "rollout"
	// HowRollback: fleet rollback, or a failed rollout's automatic one
	// (the release stays; only the attempt is recorded).
	HowRollback = "rollback"
)

// Release is one relay build the fleet ran.
type Release struct {
	Digest string `json:"digest"`
	// Version is the build's own version string (relay --version).
	Version string    `json:"version,omitempty"`
	At      time.Time `json:"at"`
	// By is who made it the fleet's release: user@host.
	By string `json:"by"`
	// How is HowFirst, HowRollout or HowRollback.
	How string `json:"how"`
	// Previous is the release it replaced ("" for the first).
	Previous string `json:"previous,omitempty"`
}

// Attempt is a rollout that failed and was rolled back.
type Attempt struct {
	Digest  string    `json:"digest"`
	Version string    `json:"version,omitempty"`
	At      time.Time `json:"at"`
	By      string    `json:"by"`
	// Why is the failed check and its figure.
	Why string `json:"why"`
}

// History is a fleet's releases, newest first: Releases[0] is the one the
// fleet runs. A fleet that never had one has none.
type History struct {
	Releases []Release `json:"releases"`
	Failed   []Attempt `json:"failed,omitempty"`
}

// Current is the release the fleet runs ("" when none yet).
func (h *History) Current() string {
	if h == nil || len(h.Releases) == 0 {
		return ""
	}
	return h.Releases[0].Digest
}

// Find is the newest entry for digest (nil when none).
func (h *History) Find(digest string) *Release {
	for i := range h.Releases {
		if h.Releases[i].Digest == digest {
			return &h.Releases[i]
		}
	}
	return nil
}

// add makes r current; the history keeps Keep releases, each build once
// (a rollback to a release makes its entry the newest).
func (h *History) add(r Release) {
	r.Previous = h.Current()
	out := []Release{r}
	for _, old := range h.Releases {
		if old.Digest != r.Digest && len(out) < Keep {
			out = append(out, old)
		}
	}
	h.Releases = out
}

// Book reads and writes a fleet's History: the "history" output of stack
// FLEET of Project in the fleet's backend.
type Book struct {
	stack *outputstack.Stack
	Fleet string
}

const historyOutput = "history"

// NewBook is the book of fleet in ws (a workspace of Project).
func NewBook(ws auto.Workspace, fleet string) *Book {
	return &Book{stack: &outputstack.Stack{WS: ws, Project: Project, Stack: fleet}, Fleet: fleet}
}

// Load reads the history (empty when the fleet has none).
func (b *Book) Load(ctx context.Context) (*History, error) {
	outputs, _, err := b.stack.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("release history: %w", err)
	}
	h := &History{}
	if raw, ok := outputs[historyOutput]; ok {
		if err := json.Unmarshal(raw, h); err != nil {
			return nil, fmt.Errorf("release history: stack %s/%s: %w", Project, b.Fleet, err)
		}
	}
	return h, nil
}

// Record makes r the fleet's release (read, changed, written whole) and
// returns the history written.
func (b *Book) Record(ctx context.Context, r Release) (*History, error) {
	return b.change(ctx, func(h *History) { h.add(r) })
}

// RecordFailure keeps a failed attempt (the last Keep).
func (b *Book) RecordFailure(ctx context.Context, a Attempt) (*History, error) {
	return b.change(ctx, func(h *History) {
		h.Failed = append([]Attempt{a}, h.Failed...)
		if len(h.Failed) > Keep {
			h.Failed = h.Failed[:Keep]
		}
	})
}

func (b *Book) change(ctx context.Context, f func(*History)) (*History, error) {
	h, err := b.Load(ctx)
	if err != nil {
		return nil, err
	}
	f(h)
	if err := b.stack.Save(ctx, map[string]any{historyOutput: h, "version": 1}, false); err != nil {
		return nil, fmt.Errorf("release history: %w", err)
	}
	return h, nil
}

// Who names the operator: user@host.
func Who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
