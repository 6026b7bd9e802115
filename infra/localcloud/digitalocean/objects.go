package digitalocean

import (
	"crypto/rand"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func (s *Server) actions(q *request) reply {
	switch {
	case q.is(http.MethodGet, 1):
		var out []map[string]any
		for _, id := range slices.Sorted(maps.Keys(s.st.Actions)) {
			out = append(out, actionJSON(s.st.Actions[id]))
		}
		return ok(http.StatusOK, page(q, "actions", out, len(out)))
	case q.is(http.MethodGet, 2):
		id, err := strconv.Atoi(q.parts[1])
		a := s.st.Actions[id]
		if err != nil || a == nil {
			return notFound()
		}
		return ok(http.StatusOK, map[string]any{"action": actionJSON(a)})
	}
	return notFound()
}

func actionJSON(a *action) map[string]any {
	var completed any
	if a.Completed != nil {
		completed = a.Completed.Format(time.RFC3339)
	}
	return map[string]any{
		"id": a.ID, "status": a.Status, "type": a.Type, "started_at": a.Started.Format(time.RFC3339),
		"completed_at": completed, "resource_id": a.ResourceID, "resource_type": a.ResourceType,
		"region": regionJSON(a.Region), "region_slug": a.Region,
	}
}

func (s *Server) tags(q *request) reply {
	switch {
	case q.is(http.MethodGet, 1):
		var out []map[string]any
		for _, t := range slices.Sorted(maps.Keys(s.st.Tags)) {
			out = append(out, s.tagJSON(t))
		}
		return ok(http.StatusOK, page(q, "tags", out, len(out)))
	case q.is(http.MethodPost, 1):
		var req struct {
			Name string `json:"name"`
		}
		if err := q.decode(&req); err != nil {
			return fail(http.StatusUnprocessableEntity, "%v", err)
		}
		if len(req.Name) > 255 || !tagName.MatchString(req.Name) {
			return fail(http.StatusUnprocessableEntity, "tag %q is invalid: want letters, digits, ':', '-' and '_', at most 255", req.Name)
		}
		s.st.Tags[req.Name] = true
		return s.saved(ok(http.StatusCreated, map[string]any{"tag": s.tagJSON(req.Name)}))
	}
	if len(q.parts) < 2 {
		return notFound()
	}
	tag := q.parts[1]
	if !s.st.Tags[tag] {
		return notFound()
	}
	switch {
	case q.is(http.MethodGet, 2):
		return ok(http.StatusOK, map[string]any{"tag": s.tagJSON(tag)})
	case q.is(http.MethodDelete, 2):
		delete(s.st.Tags, tag)
		for _, d := range s.st.Droplets {
			d.Tags = slices.DeleteFunc(d.Tags, func(t string) bool { return t == tag })
		}
		for _, fw := range s.st.Firewalls {
			fw.Tags = slices.DeleteFunc(fw.Tags, func(t string) bool { return t == tag })
		}
		return s.saved(ok(http.StatusNoContent, nil))
	case len(q.parts) == 3 && q.parts[2] == "resources" && (q.r.Method == http.MethodPost || q.r.Method == http.MethodDelete):
		var req struct {
			Resources []struct {
				ID   string `json:"resource_id"`
				Type string `json:"resource_type"`
			} `json:"resources"`
		}
		if err := q.decode(&req); err != nil {
			return fail(http.StatusUnprocessableEntity, "%v", err)
		}
		if len(req.Resources) == 0 {
			return fail(http.StatusUnprocessableEntity, "resources: want at least one")
		}
		var ds []*droplet
		for _, r := range req.Resources {
			if r.Type != "droplet" {
				return fail(http.StatusUnprocessableEntity, "resource type %q: the local cloud tags droplets only", r.Type)
			}
			id, err := strconv.Atoi(r.ID)
			d := s.st.Droplets[id]
			if err != nil || d == nil {
				return fail(http.StatusNotFound, "droplet %q could not be found", r.ID)
			}
			ds = append(ds, d)
		}
		for _, d := range ds {
			d.Tags = slices.DeleteFunc(d.Tags, func(t string) bool { return t == tag })
			if q.r.Method == http.MethodPost {
				d.Tags = append(d.Tags, tag)
			}
		}
		return s.saved(ok(http.StatusNoContent, nil))
	}
	return notFound()
}

func (s *Server) tagJSON(tag string) map[string]any {
	n, last := 0, ""
	for _, d := range s.sortedDroplets() {
		if slices.Contains(d.Tags, tag) {
			n++
			last = fmt.Sprintf("/v2/droplets/%d", d.ID)
		}
	}
	zero := map[string]any{"count": 0, "last_tagged_uri": ""}
	return map[string]any{"name": tag, "resources": map[string]any{
		"count": n, "last_tagged_uri": last,
		"droplets": map[string]any{"count": n, "last_tagged_uri": last},
		"images":   zero, "volumes": zero, "volume_snapshots": zero, "databases": zero,
	}}
}

// firewallName is the API's pattern for firewall names.
var firewallName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9.-]+$`)

func (s *Server) firewalls(q *request) reply {
	switch {
	case q.is(http.MethodGet, 1):
		var out []map[string]any
		for _, fw := range s.sortedFirewalls() {
			out = append(out, firewallJSON(fw))
		}
		return ok(http.StatusOK, page(q, "firewalls", out, len(out)))
	case q.is(http.MethodPost, 1):
		fw := &firewall{ID: uuid(), Created: s.now().UTC().Truncate(time.Second)}
		if rp, bad := s.setFirewall(fw, q); bad {
			return rp
		}
		s.st.Firewalls[fw.ID] = fw
		return s.saved(ok(http.StatusAccepted, map[string]any{"firewall": firewallJSON(fw)}))
	}
	if len(q.parts) < 2 {
		return notFound()
	}
	fw := s.st.Firewalls[q.parts[1]]
	if fw == nil {
		return notFound()
	}
	switch {
	case q.is(http.MethodGet, 2):
		return ok(http.StatusOK, map[string]any{"firewall": firewallJSON(fw)})
	case q.is(http.MethodPut, 2):
		next := *fw
		if rp, bad := s.setFirewall(&next, q); bad {
			return rp
		}
		*fw = next
		return s.saved(ok(http.StatusOK, map[string]any{"firewall": firewallJSON(fw)}))
	case q.is(http.MethodDelete, 2):
		delete(s.st.Firewalls, fw.ID)
		return s.saved(ok(http.StatusNoContent, nil))
	case len(q.parts) == 3 && q.parts[2] == "droplets" && (q.r.Method == http.MethodPost || q.r.Method == http.MethodDelete):
		var req struct {
			IDs []int `json:"droplet_ids"`
		}
		if err := q.decode(&req); err != nil {
			return fail(http.StatusUnprocessableEntity, "%v", err)
		}
		for _, id := range req.IDs {
			if s.st.Droplets[id] == nil {
				return fail(http.StatusUnprocessableEntity, "droplet %d does not exist", id)
			}
		}
		fw.DropletIDs = slices.DeleteFunc(fw.DropletIDs, func(x int) bool { return slices.Contains(req.IDs, x) })
		if q.r.Method == http.MethodPost {
			fw.DropletIDs = append(fw.DropletIDs, req.IDs...)
			slices.Sort(fw.DropletIDs)
		}
		return s.saved(ok(http.StatusNoContent, nil))
	case len(q.parts) == 3 && q.parts[2] == "tags" && (q.r.Method == http.MethodPost || q.r.Method == http.MethodDelete):
		var req struct {
			Tags []string `json:"tags"`
		}
		if err := q.decode(&req); err != nil {
			return fail(http.StatusUnprocessableEntity, "%v", err)
		}
		for _, t := range req.Tags {
			if !s.st.Tags[t] {
				return fail(http.StatusUnprocessableEntity, "tag %s does not exist", t)
			}
		}
		fw.Tags = slices.DeleteFunc(fw.Tags, func(t string) bool { return slices.Contains(req.Tags, t) })
		if q.r.Method == http.MethodPost {
			fw.Tags = append(fw.Tags, req.Tags...)
		}
		return s.saved(ok(http.StatusNoContent, nil))
	}
	return notFound()
}

func (s *Server) sortedFirewalls() []*firewall {
	return slices.SortedFunc(maps.Values(s.st.Firewalls), func(a, b *firewall) int {
		return strings.Compare(a.Created.Format(time.RFC3339)+a.ID, b.Created.Format(time.RFC3339)+b.ID)
	})
}

// firewallRequest is a firewall create or update request.
type firewallRequest struct {
	Name     string   `json:"name"`
	Inbound  []wire   `json:"inbound_rules"`
	Outbound []wire   `json:"outbound_rules"`
	Droplets []int    `json:"droplet_ids"`
	Tags     []string `json:"tags"`
}

// wire is a rule as the API reads and writes it.
type wire struct {
	Protocol     string  `json:"protocol"`
	Ports        string  `json:"ports"`
	Sources      *target `json:"sources,omitempty"`
	Destinations *target `json:"destinations,omitempty"`
}

// setFirewall reads a create or update request into fw, checking it as
// the API does: names, protocols, ports, addresses, and that its tags and
// droplets exist. All ports read back as "0", as does ICMP's.
func (s *Server) setFirewall(fw *firewall, q *request) (reply, bool) {
	var req firewallRequest
	if err := q.decode(&req); err != nil {
		return fail(http.StatusUnprocessableEntity, "%v", err), true
	}
	if !firewallName.MatchString(req.Name) {
		return fail(http.StatusUnprocessableEntity, "name %q is invalid: want a letter or digit, then letters, digits, '.' and '-'", req.Name), true
	}
	for _, t := range req.Tags {
		if !s.st.Tags[t] {
			return fail(http.StatusUnprocessableEntity, "tag %s does not exist", t), true
		}
	}
	for _, id := range req.Droplets {
		if s.st.Droplets[id] == nil {
			return fail(http.StatusUnprocessableEntity, "droplet %d does not exist", id), true
		}
	}
	if len(req.Inbound)+len(req.Outbound) == 0 {
		return fail(http.StatusUnprocessableEntity, "a firewall needs at least one inbound or outbound rule"), true
	}
	read := func(dir string, ws []wire) ([]rule, error) {
		var out []rule
		for i, w := range ws {
			t := w.Sources
			if dir == "outbound" {
				t = w.Destinations
			}
			if t == nil {
				return nil, fmt.Errorf("%s rule %d: no %s", dir, i+1, map[string]string{"inbound": "sources", "outbound": "destinations"}[dir])
			}
			ports, err := rulePorts(w.Protocol, w.Ports)
			if err != nil {
				return nil, fmt.Errorf("%s rule %d: %v", dir, i+1, err)
			}
			for _, a := range t.Addresses {
				if _, err := netip.ParsePrefix(a); err != nil {
					if _, err := netip.ParseAddr(a); err != nil {
						return nil, fmt.Errorf("%s rule %d: address %q: want an IP address or CIDR", dir, i+1, a)
					}
				}
			}
			out = append(out, rule{Protocol: w.Protocol, Ports: ports, Target: *t})
		}
		return out, nil
	}
	in, err := read("inbound", req.Inbound)
	if err != nil {
		return fail(http.StatusUnprocessableEntity, "%v", err), true
	}
	out, err := read("outbound", req.Outbound)
	if err != nil {
		return fail(http.StatusUnprocessableEntity, "%v", err), true
	}
	fw.Name, fw.Inbound, fw.Outbound = req.Name, in, out
	fw.DropletIDs, fw.Tags = slices.Sorted(slices.Values(req.Droplets)), slices.Clone(req.Tags)
	return reply{}, false
}

// rulePorts is the ports a rule reads back with: "0" for all (and for
// ICMP), else a port or a range as sent.
func rulePorts(protocol, ports string) (string, error) {
	switch protocol {
	case "icmp":
		return "0", nil
	case "tcp", "udp":
	default:
		return "", fmt.Errorf("protocol %q: want tcp, udp or icmp", protocol)
	}
	switch ports {
	case "0", "all", "1-65535":
		return "0", nil
	}
	lo, hi, isRange := strings.Cut(ports, "-")
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if !isRange {
		b, err2 = a, nil
	}
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return "", fmt.Errorf("ports %q: want a port, a range like 8000-9000, or 0 for all", ports)
	}
	return ports, nil
}

func firewallJSON(fw *firewall) map[string]any {
	rules := func(rs []rule, key string) []any {
		out := []any{}
		for _, r := range rs {
			out = append(out, map[string]any{"protocol": r.Protocol, "ports": r.Ports, key: r.Target})
		}
		return out
	}
	ids := fw.DropletIDs
	if ids == nil {
		ids = []int{}
	}
	tags := fw.Tags
	if tags == nil {
		tags = []string{}
	}
	return map[string]any{
		"id": fw.ID, "name": fw.Name, "status": "succeeded", "created_at": fw.Created.Format(time.RFC3339),
		"pending_changes": []any{}, "droplet_ids": ids, "tags": tags,
		"inbound_rules": rules(fw.Inbound, "sources"), "outbound_rules": rules(fw.Outbound, "destinations"),
	}
}

func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
