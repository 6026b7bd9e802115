// Package hcloud is relayfleet's Hetzner Cloud box backend, on hcloud-go
// v2.52.0 (docs/operations.md, "Clouds: tokens and the fleet's stack"): servers with labels and cloud-init user
// data that installs the host key relayfleet generated, created, listed by
// label selector and deleted idempotently, each step waited on through the
// Action API; and one firewall per fleet, applied by label selector, that
// opens only the relay ports and SSH from the admin ranges.
//
// API calls that are rate limited (429) or fail with a 5xx are retried with
// jittered exponential backoff by backend.Retry's transport, the only
// retry layer: hcloud-go's own retry handler is turned off, because it
// retries only some of these (not 500 or 503) and would multiply the
// tries. Other errors come back as one line naming the resource, the HTTP
// status and the API's error code and message; never the token.
package hcloud
