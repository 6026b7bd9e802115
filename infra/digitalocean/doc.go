// Package digitalocean is relayfleet's DigitalOcean box backend, on godo
// (docs/operations.md, "Clouds: tokens and the fleet's stack"): droplets tagged with their labels as "key:value"
// tags and cloud-init user data that installs the host key relayfleet
// generated, created (waited on through the create action and the
// droplet's status), listed by tag and deleted idempotently; and one
// firewall per fleet, applied by tag, that opens only the relay ports and
// SSH from the admin ranges.
//
// API calls that are rate limited (429) or fail with a 5xx are retried with
// jittered exponential backoff by backend.Retry's transport, which honours
// Retry-After. godo's own retry (WithRetryAndBackoffs) is not used: it
// retries a failed POST blindly, which can make a second droplet (droplet
// names are not unique), and it needs an oauth2 transport to build.
// Other errors come back as one line naming the resource, the HTTP status
// and the API's error id and message; never the token.
package digitalocean
