package main

import (
	"testing"
)

func TestRolloutBadInput(t *testing.T) {
	usageErrors(t, []usageCase{
		{"bad router", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--router", "localhost:8080"}, `fleet rollout: flag --router: invalid value "localhost:8080": want an http:// or https:// URL, got "localhost:8080"` + "\n"},
		{"bad shed rate", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--shed-rate", "0"}, "fleet rollout: flag --shed-rate: 0 is out of range: want 1 to 100000\n"},
		{"bad shed wait", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--shed-wait", "0s"}, "fleet rollout: flag --shed-wait: 0s is out of range: want 1s to 1h\n"},
		{"bad rebalance rate", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--rebalance-rate", "-1"}, "fleet rollout: flag --rebalance-rate: -1 is out of range: want 1 to 100000\n"},
		{"bad router poll", []string{"rollout", "--inventory", "x", "--relay-binary", "y", "--router-poll", "0s"}, "fleet rollout: flag --router-poll: 0s is out of range: want 100ms to 1m\n"},
	})
}
