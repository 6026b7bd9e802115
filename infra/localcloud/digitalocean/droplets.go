package digitalocean

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/localcloud"
	"github.com/relayfleet/relayfleet/infra/localcloud/faults"
)

// The API's patterns (DigitalOcean-public.v2.yaml): droplet and tag names.
var (
	dropletName = regexp.MustCompile(`^[a-zA-Z0-9]?[a-z0-9A-Z.\-]*[a-z0-9A-Z]$`)
	tagName     = regexp.MustCompile(`^[a-zA-Z0-9_\-:]+$`)
)

const maxUserData = 64 << 10 // DigitalOcean's limit on user_data

func (s *Server) droplets(q *request) reply {
	switch {
	case q.is(http.MethodGet, 1):
		query := q.r.URL.Query()
		var out []map[string]any
		for _, d := range s.sortedDroplets() {
			if (query.Get("tag_name") == "" || slices.Contains(d.Tags, query.Get("tag_name"))) &&
				(query.Get("name") == "" || d.Name == query.Get("name")) {
				out = append(out, s.dropletJSON(d))
			}
		}
		return ok(http.StatusOK, page(q, "droplets", out, len(out)))
	case q.is(http.MethodPost, 1):
		return s.createDroplet(q)
	case q.is(http.MethodDelete, 1):
		tag := q.r.URL.Query().Get("tag_name")
		if tag == "" {
			return fail(http.StatusUnprocessableEntity, "tag_name is required to delete droplets by tag")
		}
		for _, d := range s.sortedDroplets() {
			if slices.Contains(d.Tags, tag) && !d.Deleting {
				s.deleteLocked(d)
			}
		}
		return s.saved(ok(http.StatusNoContent, nil))
	case len(q.parts) == 2:
		id, err := strconv.Atoi(q.parts[1])
		d := s.st.Droplets[id]
		if err != nil || d == nil {
			return notFound()
		}
		switch q.r.Method {
		case http.MethodGet:
			return ok(http.StatusOK, map[string]any{"droplet": s.dropletJSON(d)})
		case http.MethodDelete:
			if !d.Deleting {
				s.deleteLocked(d)
			}
			return s.saved(ok(http.StatusNoContent, nil))
		}
	}
	return notFound()
}

func (s *Server) sortedDroplets() []*droplet {
	return slices.SortedFunc(maps.Values(s.st.Droplets), func(a, b *droplet) int { return a.ID - b.ID })
}

// createRequest is the part of a droplet create request the local cloud
// reads.
type createRequest struct {
	Name     string          `json:"name"`
	Names    []string        `json:"names"`
	Region   string          `json:"region"`
	Size     string          `json:"size"`
	Image    json.RawMessage `json:"image"` // a slug or an id
	IPv6     bool            `json:"ipv6"`
	UserData string          `json:"user_data"`
	Tags     []string        `json:"tags"`
}

func (s *Server) createDroplet(q *request) reply {
	var req createRequest
	if err := q.decode(&req); err != nil {
		return fail(http.StatusUnprocessableEntity, "%v", err)
	}
	if len(req.Names) > 0 {
		return fail(http.StatusUnprocessableEntity, "the local cloud creates one droplet a request: send name, not names")
	}
	if len(req.Name) > 255 || !dropletName.MatchString(req.Name) {
		return fail(http.StatusUnprocessableEntity, "Name is invalid: %q: want letters, digits, '.' and '-', a letter or digit last, at most 255", req.Name)
	}
	sz, found := sizeOf(req.Size)
	if !found {
		return fail(http.StatusUnprocessableEntity, "You specified an invalid size for Droplet creation: %q (the local cloud has %s).", req.Size, sizeSlugs())
	}
	if req.Region == "" {
		req.Region = "nyc3"
	}
	if !slices.Contains(regions, req.Region) {
		return fail(http.StatusUnprocessableEntity, "You specified an invalid region for Droplet creation: %q (the local cloud has %s).", req.Region, strings.Join(regions, ", "))
	}
	var image any
	var slug string
	var imageID int
	if json.Unmarshal(req.Image, &slug) == nil && slug != "" {
		image = slug
	} else if json.Unmarshal(req.Image, &imageID) == nil && imageID > 0 {
		image = imageID
	} else {
		return fail(http.StatusUnprocessableEntity, "You specified an invalid image for Droplet creation: want an image slug or id.")
	}
	if len(req.UserData) > maxUserData {
		return fail(http.StatusUnprocessableEntity, "user_data is %d bytes: at most %d", len(req.UserData), maxUserData)
	}
	for _, t := range req.Tags {
		if len(t) > 255 || !tagName.MatchString(t) {
			return fail(http.StatusUnprocessableEntity, "tag %q is invalid: want letters, digits, ':', '-' and '_', at most 255", t)
		}
	}
	// Droplet names need not be unique at DigitalOcean; here each is a
	// lab box's name, and must be.
	for _, d := range s.st.Droplets {
		if d.Name == req.Name {
			return fail(http.StatusUnprocessableEntity, "a droplet named %s exists (id %d): the local cloud keeps droplet names unique", d.Name, d.ID)
		}
	}
	fc := faults.Create{Name: req.Name, Shape: sz.Slug, Location: req.Region}
	if rule, refused := s.cfg.Faults.Unavailable(fc); refused {
		s.logf("droplet %s: %s in %s refused as unavailable (faults file)", req.Name, sz.Slug, req.Region)
		// DigitalOcean's answers when it has no room for the size there,
		// or takes no droplets in the region.
		if rule.Shape == "" {
			return fail(http.StatusUnprocessableEntity, "Region is not available")
		}
		return fail(http.StatusUnprocessableEntity, "Size is not available in this region.")
	}
	for _, t := range req.Tags {
		s.st.Tags[t] = true
	}
	now := s.now().UTC().Truncate(time.Second)
	d := &droplet{
		ID: s.st.newID(), Name: req.Name, Size: sz.Slug, Region: req.Region, Image: image,
		Tags: slices.Compact(slices.Clone(req.Tags)), Status: statusNew, Created: now,
		NoIPv4: s.cfg.Faults.NoAddress(fc),
	}
	if d.Tags == nil {
		d.Tags = []string{}
	}
	s.st.Droplets[d.ID] = d
	a := s.newAction("create", d.ID, req.Region)
	spec := localcloud.MachineSpec{
		Name: d.Name, Cores: sz.Vcpus, RAM: int64(sz.Memory) << 20,
		Labels: labels(d.Tags), UserData: []byte(req.UserData),
	}
	if err := s.saveLocked(); err != nil {
		delete(s.st.Droplets, d.ID)
		delete(s.st.Actions, a.ID)
		s.logf("%v", err)
		return fail(http.StatusInternalServerError, "the local cloud could not save its state; see its log")
	}
	s.boot(d.ID, spec, fc)
	return ok(http.StatusAccepted, map[string]any{
		"droplet": s.dropletJSON(d),
		"links": map[string]any{"actions": []any{map[string]any{
			"id": a.ID, "rel": "create", "href": fmt.Sprintf("%s/v2/actions/%d", base(q.r), a.ID),
		}}},
	})
}

func base(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// labels are the "key:value" tags as labels, as MachineSpec wants them.
// A tag with more colons (our backend's set tag, "relayfleet:k:v:k:v")
// is not a label.
func labels(tags []string) map[string]string {
	out := map[string]string{}
	for _, t := range tags {
		if k, v, found := strings.Cut(t, ":"); found && k != "" && !strings.Contains(v, ":") {
			out[k] = v
		}
	}
	return out
}

func (s *Server) newAction(typ string, resource int, region string) *action {
	a := &action{ID: s.st.newID(), Status: "in-progress", Type: typ, Started: s.now().UTC().Truncate(time.Second), ResourceID: resource, ResourceType: "droplet", Region: region}
	s.st.Actions[a.ID] = a
	return a
}

func (s *Server) finishAction(resource int, typ, status string) {
	for _, a := range s.st.Actions {
		if a.ResourceID == resource && a.Type == typ && a.Status == "in-progress" {
			now := s.now().UTC().Truncate(time.Second)
			a.Status, a.Completed = status, &now
		}
	}
}

// boot creates the droplet's machine in the background; the droplet turns
// active and its create action completed once the machine is up, or the
// action errored and the droplet goes if it fails. While the faults file
// says the create hangs, it waits first.
func (s *Server) boot(id int, spec localcloud.MachineSpec, fc faults.Create) {
	if s.ctx.Err() != nil {
		return // closed: the next New errors and deletes it
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		gone := func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			d := s.st.Droplets[id]
			return d == nil || d.Deleting
		}
		var m localcloud.Machine
		err := s.cfg.Faults.Hold(s.ctx, fc, gone)
		if err == nil {
			m, err = s.m.Create(s.ctx, spec)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		d := s.st.Droplets[id]
		switch {
		case d == nil:
			return
		case err != nil:
			s.failCreateLocked(d, err.Error())
			s.deleteLocked(d)
		case d.Deleting:
			// Deleted while it was created: now its machine can go.
			d.Status = statusActive
			s.finishAction(id, "create", "completed")
			s.deleteLocked(d)
		default:
			d.Status, d.IPv4 = statusActive, m.IPv4.String()
			s.finishAction(id, "create", "completed")
		}
		if err := s.saveLocked(); err != nil {
			s.logf("%v", err)
		}
	}()
}

func (s *Server) failCreateLocked(d *droplet, why string) {
	s.logf("droplet %s (%d): create failed: %s", d.Name, d.ID, why)
	s.finishAction(d.ID, "create", "errored")
}

// deleteLocked marks the droplet deleted and removes its machine in the
// background; the record goes once the machine has. A droplet still
// being created is removed when its creation ends (boot).
func (s *Server) deleteLocked(d *droplet) {
	creating := d.Status == statusNew && !d.Deleting && s.creating(d.ID)
	d.Deleting = true
	if creating {
		return
	}
	if s.ctx.Err() != nil {
		return // closed: the next New deletes it
	}
	id, name := d.ID, d.Name
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.m.Delete(s.ctx, name)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			// Kept as deleting: the next start of the server tries again.
			s.logf("droplet %s (%d): delete: %v", name, id, err)
			return
		}
		delete(s.st.Droplets, id)
		for _, fw := range s.st.Firewalls {
			fw.DropletIDs = slices.DeleteFunc(fw.DropletIDs, func(x int) bool { return x == id })
		}
		if err := s.saveLocked(); err != nil {
			s.logf("%v", err)
		}
	}()
}

// creating reports whether the droplet's create action is in progress
// in this server (boot is running for it).
func (s *Server) creating(id int) bool {
	for _, a := range s.st.Actions {
		if a.ResourceID == id && a.Type == "create" && a.Status == "in-progress" {
			return true
		}
	}
	return false
}

func (s *Server) dropletJSON(d *droplet) map[string]any {
	sz, _ := sizeOf(d.Size)
	v4 := []any{}
	if a, err := netip.ParseAddr(d.IPv4); err == nil && d.Status == statusActive && !d.NoIPv4 {
		gw := a.As4()
		gw[3] = 1
		v4 = append(v4, map[string]any{"ip_address": a.String(), "netmask": "255.255.255.0", "gateway": netip.AddrFrom4(gw).String(), "type": "public"})
	}
	status := d.Status
	return map[string]any{
		"id": d.ID, "name": d.Name, "memory": sz.Memory, "vcpus": sz.Vcpus, "disk": sz.Disk,
		"locked": false, "status": status, "created_at": d.Created.Format(time.RFC3339),
		"features": []string{}, "backup_ids": []int{}, "next_backup_window": nil, "snapshot_ids": []int{},
		"image": imageJSON(d.Image, d.Region), "volume_ids": []string{},
		"size": sz, "size_slug": sz.Slug,
		// The local cloud gives no IPv6: lab boxes have none.
		"networks": map[string]any{"v4": v4, "v6": []any{}},
		"region":   regionJSON(d.Region),
		"tags":     d.Tags,
	}
}

func regionJSON(slug string) map[string]any {
	var slugs []string
	for _, z := range sizes {
		slugs = append(slugs, z.Slug)
	}
	return map[string]any{"name": slug + " (local cloud)", "slug": slug, "features": []string{"metadata"}, "available": true, "sizes": slugs}
}

// imageJSON describes the image a droplet was asked for; every lab box
// runs Debian whatever it is.
func imageJSON(image any, region string) map[string]any {
	out := map[string]any{
		"distribution": "Debian", "public": true, "regions": []string{region},
		"created_at": "2026-01-01T00:00:00Z", "type": "base", "min_disk_size": 10, "size_gigabytes": 1,
		"description": "the local cloud's lab box image", "tags": []string{}, "status": "available", "error_message": "",
	}
	switch v := image.(type) {
	case string:
		h := fnv.New32a()
		h.Write([]byte(v))
		out["id"], out["slug"], out["name"] = int(h.Sum32()>>1), v, v
	case float64: // an id, read back from the state file
		out["id"], out["slug"], out["name"] = int(v), nil, fmt.Sprintf("image %d", int(v))
	case int:
		out["id"], out["slug"], out["name"] = v, nil, fmt.Sprintf("image %d", v)
	}
	return out
}
