//go:build !linux

package main

import "os/exec"

// pinning is Linux-only; elsewhere the relay runs unpinned.
type pinning struct{ desc string }

func pin() (*pinning, error) { return nil, nil }

func (p *pinning) start(cmd *exec.Cmd) error { return cmd.Start() }
