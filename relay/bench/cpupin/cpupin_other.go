//go:build !linux

package cpupin

import "os/exec"

// Pinning is Linux-only; elsewhere the relay runs unpinned.
type Pinning struct{ Desc string }

// Pin pins nothing here.
func Pin() (*Pinning, error) { return nil, nil }

// Start starts cmd unpinned.
func (p *Pinning) Start(cmd *exec.Cmd) error { return cmd.Start() }
