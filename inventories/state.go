package inventories

import (
	"fmt"
	"net/url"
	"strings"
)

// State says where a fleet's Pulumi stacks, event records, leases and
// release history live: one backend every operator and the events timer
// use, named once in the fleet file.
type State struct {
	// Backend is a Pulumi DIY backend URL: file:///ABSOLUTE/DIR, or an
	// object store (s3://BUCKET/PREFIX?endpoint=...&region=...,
	// gs://BUCKET, azblob://CONTAINER). "" is the file backend in the
	// operator's state dir. It never carries credentials: the store's
	// come from the environment (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE and
	// AWS_PROFILE, for s3://).
	Backend string `yaml:"backend"`
}

// BackendSchemes are the schemes state.backend takes.
var BackendSchemes = []string{"file", "s3", "gs", "azblob"}

// credentialParams are query parameters (lower case, '_' and '-'
// removed) that would put a store's credentials in the URL.
var credentialParams = []string{"accesskey", "accesskeyid", "awsaccesskeyid", "secret", "secretkey", "secretaccesskey",
	"awssecretaccesskey", "sessiontoken", "awssessiontoken", "token", "password", "sastoken", "sig", "signature",
	"credentials", "key", "accountkey", "clientsecret"}

// IsRemoteBackend says whether a Pulumi backend URL is one other
// machines may share: anything but file:// ("" is the state dir's file
// backend).
func IsRemoteBackend(u string) bool {
	return u != "" && !strings.HasPrefix(u, "file:")
}

// CheckBackendURL checks a backend URL as state.backend takes it: a
// scheme of BackendSchemes, a bucket (or an absolute directory for
// file://), and no credentials in it.
func CheckBackendURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || !strings.Contains(raw, "://") {
		return fmt.Errorf("want a URL such as s3://BUCKET/PREFIX?region=eu-central-1 or file:///var/lib/relayfleet/state, got %q", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%s:// URL carries a user or password; give the store's credentials in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE), never in the URL", u.Scheme)
	}
	scheme := strings.ToLower(u.Scheme)
	known := false
	for _, s := range BackendSchemes {
		known = known || scheme == s
	}
	if !known {
		return fmt.Errorf("scheme %q: want one of %s:// (the Pulumi Cloud is not supported here)", u.Scheme, strings.Join(BackendSchemes, "://, "))
	}
	for k := range u.Query() {
		norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k))
		for _, c := range credentialParams {
			if norm == c {
				return fmt.Errorf("query parameter %q carries a credential; give the store's credentials in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE), never in the URL", k)
			}
		}
	}
	if scheme == "file" {
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return fmt.Errorf("%q: want file:///ABSOLUTE/DIR (three slashes)", raw)
		}
		return nil
	}
	if u.Host == "" {
		return fmt.Errorf("%q: want %s://BUCKET[/PREFIX]", raw, u.Scheme)
	}
	return nil
}

func (s *State) validate() error {
	if s.Backend == "" {
		return nil
	}
	if err := CheckBackendURL(s.Backend); err != nil {
		return fieldErr("state.backend", "%v", err)
	}
	return nil
}
