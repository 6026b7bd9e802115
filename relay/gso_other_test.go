//go:build !linux

package relay_test

import "testing"

func gsoAvailable(*testing.T) bool { return false }
