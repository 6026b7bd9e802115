package digitalocean

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/godo"

	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

const testToken = "dop_v1_s3cr3t-t0ken-XYZ"

// fakeAPI speaks the parts of the DigitalOcean API the backend uses, with
// the JSON shapes of the API's documentation (the fixtures in testdata).
type fakeAPI struct {
	backendtest.API

	nextID    int
	droplets  map[int]map[string]any
	deleted   map[int]int // droplet id -> GETs it still answers after DELETE
	userData  map[string]string
	actions   map[int]*backendtest.Action
	firewalls map[string]map[string]any
	tags      map[string]bool
	sizes     []string
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{
		nextID:   3164400,
		droplets: map[int]map[string]any{}, deleted: map[int]int{}, userData: map[string]string{},
		actions: map[int]*backendtest.Action{}, firewalls: map[string]map[string]any{}, tags: map[string]bool{},
		sizes: []string{"s-1vcpu-1gb", "s-2vcpu-4gb", "c-2"},
	}
	return f, f.Start(t, testToken, f.serve)
}

func (f *fakeAPI) newID() int { f.nextID++; return f.nextID }

// addDroplet stores an active droplet with the tags.
func (f *fakeAPI) addDroplet(name string, tags ...string) int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	id := f.newID()
	d := f.Object("droplet.json")
	d["id"], d["name"], d["status"], d["tags"] = id, name, "active", tags
	d["networks"] = f.Object("networks.json")
	f.droplets[id] = d
	return id
}

func (f *fakeAPI) newAction(typ string, resID int, onDone func()) map[string]any {
	a := f.Object("action.json")
	id := f.newID()
	a["id"], a["type"], a["resource_id"] = id, typ, resID
	f.actions[id] = &backendtest.Action{Obj: a, OnDone: onDone}
	return a
}

// page answers a list request with DigitalOcean's links and meta, two
// items a page so that the clients' paging is exercised.
func page(r *http.Request, key string, items []map[string]any) map[string]any {
	slices.SortFunc(items, func(a, b map[string]any) int { return strings.Compare(fmt.Sprint(a["id"]), fmt.Sprint(b["id"])) })
	const per = 2
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	n = max(n, 1)
	last := max((len(items)+per-1)/per, 1)
	lo, hi := min((n-1)*per, len(items)), min(n*per, len(items))
	pages := map[string]any{}
	link := func(p int) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(p))
		return "http://" + r.Host + r.URL.Path + "?" + q.Encode()
	}
	if n < last {
		pages["next"], pages["last"] = link(n+1), link(last)
	}
	if n > 1 {
		pages["prev"], pages["first"] = link(n-1), link(1)
	}
	return map[string]any{key: items[lo:hi], "links": map[string]any{"pages": pages}, "meta": map[string]any{"total": len(items)}}
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v2, kind, id, ...
	q := r.URL.Query()
	var id int
	if len(parts) > 2 {
		id, _ = strconv.Atoi(parts[2])
	}
	kind := ""
	if len(parts) > 1 {
		kind = parts[1]
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v2/droplets":
		var out []map[string]any
		for _, d := range f.droplets {
			tags, _ := d["tags"].([]string)
			if (q.Get("name") == "" || d["name"] == q.Get("name")) && (q.Get("tag_name") == "" || slices.Contains(tags, q.Get("tag_name"))) {
				out = append(out, d)
			}
		}
		backendtest.Reply(w, 200, page(r, "droplets", out))
	case r.Method == http.MethodPost && r.URL.Path == "/v2/droplets":
		// godo.DropletCreateRequest's image marshals to a slug but does
		// not unmarshal from one: read the request's JSON as the API does.
		var req struct {
			Name, Region, Size string
			Image              any      // a slug or an id
			IPv6               bool     `json:"ipv6"`
			UserData           string   `json:"user_data"`
			Tags               []string `json:"tags"`
		}
		f.Decode(r, body, &req)
		if !slices.Contains(f.sizes, req.Size) {
			f.Fail(w, http.StatusUnprocessableEntity, "error_invalid_size.json")
			return
		}
		did := f.newID()
		d := f.Object("droplet.json")
		d["id"], d["name"], d["status"], d["tags"] = did, req.Name, "new", req.Tags
		d["size_slug"], d["size"].(map[string]any)["slug"] = req.Size, req.Size
		d["region"].(map[string]any)["slug"] = req.Region
		d["image"].(map[string]any)["slug"] = req.Image
		if !req.IPv6 {
			d["networks"].(map[string]any)["v6"] = nil
		}
		f.droplets[did] = d
		f.userData[req.Name] = req.UserData
		for _, t := range req.Tags {
			f.tags[t] = true
		}
		a := f.newAction("create", did, func() {
			n := f.Object("networks.json")
			if !req.IPv6 {
				n["v6"] = []any{}
			}
			d["networks"], d["status"] = n, "active"
		})
		backendtest.Reply(w, http.StatusAccepted, map[string]any{"droplet": d, "links": map[string]any{"actions": []any{
			map[string]any{"id": a["id"], "rel": "create", "href": fmt.Sprintf("https://api.digitalocean.com/v2/actions/%d", a["id"])},
		}}})
	case r.Method == http.MethodGet && kind == "droplets" && len(parts) == 3:
		d, ok := f.droplets[id]
		if !ok {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		if n, gone := f.deleted[id]; gone {
			// Deletion takes a look or two to show.
			if f.deleted[id] = n - 1; n <= 0 {
				delete(f.droplets, id)
				f.Fail(w, http.StatusNotFound, "error_not_found.json")
				return
			}
		}
		// Time passes between looks: a new droplet's create action ends.
		if d["status"] == "new" {
			for _, a := range f.actions {
				if a.Obj["resource_id"] == id && a.Obj["status"] == "in-progress" {
					a.Finish(map[string]any{"status": "completed"})
				}
			}
		}
		backendtest.Reply(w, 200, map[string]any{"droplet": d})
	case r.Method == http.MethodDelete && kind == "droplets" && len(parts) == 3:
		if _, ok := f.droplets[id]; !ok {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		if _, ok := f.deleted[id]; !ok {
			f.deleted[id] = 1
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && kind == "actions" && len(parts) == 3:
		a, ok := f.actions[id]
		if !ok {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		// In progress at the first poll, completed at the second.
		a.Poll("in-progress", map[string]any{"status": "completed", "completed_at": time.Now().UTC().Format(time.RFC3339)})
		backendtest.Reply(w, 200, map[string]any{"action": a.Obj})
	case r.Method == http.MethodGet && kind == "tags" && len(parts) == 3:
		if !f.tags[parts[2]] {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		t := f.Object("tag.json")
		t["name"] = parts[2]
		backendtest.Reply(w, 200, map[string]any{"tag": t})
	case (r.Method == http.MethodPost || r.Method == http.MethodDelete) && kind == "tags" && len(parts) == 4 && parts[3] == "resources":
		tag := parts[2]
		// A tag a droplet carries exists (addDroplet does not record it).
		if !f.tags[tag] && r.Method == http.MethodPost {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		var req godo.TagResourcesRequest
		f.Decode(r, body, &req)
		for _, res := range req.Resources {
			did, _ := strconv.Atoi(res.ID)
			d, ok := f.droplets[did]
			if !ok || res.Type != godo.DropletResourceType {
				f.Fail(w, http.StatusNotFound, "error_not_found.json")
				return
			}
			tags, _ := d["tags"].([]string)
			tags = slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == tag })
			if r.Method == http.MethodPost {
				tags = append(tags, tag)
			}
			d["tags"] = tags
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && r.URL.Path == "/v2/tags":
		var req godo.TagCreateRequest
		f.Decode(r, body, &req)
		f.tags[req.Name] = true
		t := f.Object("tag.json")
		t["name"] = req.Name
		backendtest.Reply(w, http.StatusCreated, map[string]any{"tag": t})
	case r.Method == http.MethodGet && r.URL.Path == "/v2/firewalls":
		var out []map[string]any
		for _, fw := range f.firewalls {
			out = append(out, fw)
		}
		backendtest.Reply(w, 200, page(r, "firewalls", out))
	case r.Method == http.MethodPost && r.URL.Path == "/v2/firewalls":
		fw := f.Object("firewall.json")
		fw["id"] = fmt.Sprintf("bb4b2611-3d72-467b-8602-%012d", f.newID())
		if !f.setFirewall(w, r, fw, body) {
			return
		}
		f.firewalls[fw["id"].(string)] = fw
		backendtest.Reply(w, http.StatusAccepted, map[string]any{"firewall": fw})
	case kind == "firewalls" && len(parts) == 3:
		fw, ok := f.firewalls[parts[2]]
		if !ok {
			f.Fail(w, http.StatusNotFound, "error_not_found.json")
			return
		}
		switch r.Method {
		case http.MethodPut:
			if f.setFirewall(w, r, fw, body) {
				backendtest.Reply(w, 200, map[string]any{"firewall": fw})
			}
		case http.MethodDelete:
			delete(f.firewalls, parts[2])
			w.WriteHeader(http.StatusNoContent)
		default:
			backendtest.Reply(w, 200, map[string]any{"firewall": fw})
		}
	default:
		f.T.Errorf("fake DigitalOcean API: unexpected %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", http.StatusNotFound)
	}
}

// setFirewall stores a firewall request as the API shows it: all ports
// as "0", ICMP always "0"; a tag that does not exist is refused.
func (f *fakeAPI) setFirewall(w http.ResponseWriter, r *http.Request, fw map[string]any, body []byte) bool {
	var req godo.FirewallRequest
	f.Decode(r, body, &req)
	for _, t := range req.Tags {
		if !f.tags[t] {
			backendtest.Reply(w, http.StatusUnprocessableEntity, map[string]any{"id": "unprocessable_entity", "message": "tag " + t + " does not exist"})
			return false
		}
	}
	for i := range req.InboundRules {
		if req.InboundRules[i].PortRange == "1-65535" || req.InboundRules[i].Protocol == "icmp" {
			req.InboundRules[i].PortRange = "0"
		}
	}
	for i := range req.OutboundRules {
		if req.OutboundRules[i].PortRange == "1-65535" || req.OutboundRules[i].Protocol == "icmp" {
			req.OutboundRules[i].PortRange = "0"
		}
	}
	fw["name"], fw["inbound_rules"], fw["outbound_rules"], fw["tags"], fw["droplet_ids"] = req.Name, req.InboundRules, req.OutboundRules, req.Tags, req.DropletIDs
	return true
}
