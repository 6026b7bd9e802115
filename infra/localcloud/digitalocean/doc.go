// Package digitalocean serves the DigitalOcean API (v2) for the local
// cloud: New returns an http.Handler that answers what our DigitalOcean
// backend (infra/digitalocean, through godo) and the live size listing
// (inventories/pricing) ask, with droplets that are localcloud.Machines
// (lab boxes, under fleet lab cloud digitalocean).
//
// Served, in DigitalOcean's shapes (checked in the tests against
// DigitalOcean's published OpenAPI description, vendored in
// testdata/openapi):
//
//   - droplets: create (name, size, region, image, tags, user_data), get,
//     list (tag_name, name), delete, delete by tag_name. A create answers
//     202 at once with the droplet "new" and a create action in progress;
//     the machine boots in the background with the size's cores and RAM,
//     the request's "key:value" tags as labels and its user data, and the
//     droplet turns "active" with the machine's address as its public
//     IPv4 (no IPv6: lab boxes have none). If the machine fails, the action
//     is "errored" and the droplet goes.
//   - actions: get, list.
//   - tags: create, get, list, delete, tag and untag droplets.
//   - firewalls: create, get, list, update, delete, add and remove
//     droplets and tags. They are records only: nothing is filtered on the
//     boxes. Ports read back as "0" for all ports and for ICMP, as
//     DigitalOcean's do.
//   - sizes: list (those of inventories/providers.yaml and a few small
//     ones; an unknown size is refused as DigitalOcean refuses it).
//   - pagination (page, per_page; links.pages, meta.total), the bearer
//     token (401 otherwise), rate limits (ratelimit-* headers, 429 past
//     5000 requests an hour), and errors as {id, message, request_id}.
//   - faults (localcloud.Config.Faults, package localcloud/faults), as
//     DigitalOcean answers them: a create refused for capacity is 422
//     unprocessable_entity "Size is not available in this region." (a
//     rule without a shape: "Region is not available"); a request rate
//     limited is 429 too_many_requests with Retry-After and
//     ratelimit-remaining 0; a hung create leaves the droplet "new" and
//     its create action "in-progress"; a droplet without an address is
//     active with networks.v4 empty.
//   - the requests answered, counted by route and status (Requests;
//     localcloud.Config.RequestsFile).
//
// Unlike DigitalOcean, droplet names are unique (each is a box's name),
// one droplet is created a request (no "names"), and SSH keys are not
// served (our backend puts keys in the user data). The state file never
// holds user data: a droplet whose machine was booting when the server
// stopped is deleted when it starts again, and created anew by the
// caller's retry.
package digitalocean
