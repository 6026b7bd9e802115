package program

import (
	"fmt"
	"regexp"
	"strings"
)

var stackNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// CheckStackName checks a stack name a user gives ("" is the fleet's
// name, Stack's default): letters, digits, '-', '_' and '.', as Pulumi
// takes them in a file backend.
func CheckStackName(name string) error {
	if name != "" && !stackNameRE.MatchString(name) {
		return fmt.Errorf("want letters, digits, '-', '_' or '.', got %q", name)
	}
	return nil
}

// CheckBackendURL checks a Pulumi backend URL a user gives ("" is the
// default, Stack's file backend under its state dir).
func CheckBackendURL(url string) error {
	if url != "" && !strings.Contains(url, "://") {
		return fmt.Errorf("want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got %q", url)
	}
	return nil
}
