package hcloud

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"

	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

const testToken = "s3cr3t-t0ken-XYZ"

// fakeAPI speaks the parts of the Hetzner Cloud API the backend uses, with
// the JSON shapes of the API's documentation (the fixtures in testdata).
type fakeAPI struct {
	backendtest.API

	nextID      int64
	servers     map[int64]map[string]any
	serverGets  map[int64]int // GETs of a server since it started
	userData    map[string]string
	actions     map[int64]*backendtest.Action
	firewalls   map[int64]map[string]any
	serverTypes []string
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{
		nextID:  100,
		servers: map[int64]map[string]any{}, serverGets: map[int64]int{}, userData: map[string]string{},
		actions: map[int64]*backendtest.Action{}, firewalls: map[int64]map[string]any{},
		serverTypes: []string{"cpx22", "cx22", "ccx13"},
	}
	return f, f.Start(t, testToken, f.serve)
}

// addServer stores a server as the API would show it, running.
func (f *fakeAPI) addServer(name string, labels map[string]string) int64 {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	id := f.newID()
	s := f.Object("server.json")
	s["id"], s["name"], s["labels"], s["status"] = id, name, labels, "running"
	setAddrs(s, id)
	f.servers[id] = s
	return id
}

func setAddrs(s map[string]any, id int64) {
	pn := s["public_net"].(map[string]any)
	pn["ipv4"].(map[string]any)["ip"] = fmt.Sprintf("203.0.113.%d", id%250)
	pn["ipv6"].(map[string]any)["ip"] = fmt.Sprintf("2001:db8:%x::/64", id)
}

func (f *fakeAPI) newID() int64 { f.nextID++; return f.nextID }

func (f *fakeAPI) newAction(command string, resID int64, resType string, onDone func()) map[string]any {
	a := f.Object("action.json")
	id := f.newID()
	a["id"], a["command"] = id, command
	a["resources"] = []any{map[string]any{"id": resID, "type": resType}}
	f.actions[id] = &backendtest.Action{Obj: a, OnDone: onDone}
	return a
}

func (f *fakeAPI) notFound(w http.ResponseWriter, kind string, id int64) {
	var e map[string]any
	json.Unmarshal(backendtest.Fixture(f.T, "error_not_found.json"), &e)
	e["error"].(map[string]any)["message"] = fmt.Sprintf("%s with ID '%d' not found", kind, id)
	backendtest.Reply(w, http.StatusNotFound, e)
}

func list(key string, items []map[string]any) map[string]any {
	slices.SortFunc(items, func(a, b map[string]any) int { return int(a["id"].(int64) - b["id"].(int64)) })
	return map[string]any{key: items, "meta": map[string]any{"pagination": map[string]any{
		"page": 1, "per_page": 50, "previous_page": nil, "next_page": nil, "last_page": 1, "total_entries": len(items),
	}}}
}

// listNamed is list of key with the objects of objs named as the query's
// name says (all when it says none) that keep, when not nil, keeps.
func listNamed(key string, objs map[int64]map[string]any, q url.Values, keep func(map[string]any) bool) map[string]any {
	var out []map[string]any
	for _, o := range objs {
		if (q.Get("name") == "" || o["name"] == q.Get("name")) && (keep == nil || keep(o)) {
			out = append(out, o)
		}
	}
	return list(key, out)
}

// selects reports whether labels match an hcloud label selector of
// k=v terms.
func selects(sel string, labels map[string]any) bool {
	if sel == "" {
		return true
	}
	for _, term := range strings.Split(sel, ",") {
		k, v, _ := strings.Cut(term, "=")
		if labels[k] != v {
			return false
		}
	}
	return true
}

func labelsOf(obj map[string]any) map[string]any {
	switch l := obj["labels"].(type) {
	case map[string]any:
		return l
	case map[string]string:
		m := map[string]any{}
		for k, v := range l {
			m[k] = v
		}
		return m
	}
	return nil
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	id := int64(0)
	if len(parts) > 1 {
		id, _ = strconv.ParseInt(parts[1], 10, 64)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/servers":
		backendtest.Reply(w, 200, listNamed("servers", f.servers, q, func(s map[string]any) bool {
			return selects(q.Get("label_selector"), labelsOf(s))
		}))
	case r.Method == http.MethodPost && r.URL.Path == "/servers":
		var req schema.ServerCreateRequest
		f.Decode(r, body, &req)
		if !slices.Contains(f.serverTypes, req.ServerType.Name) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(backendtest.Fixture(f.T, "error_invalid_server_type.json"))
			return
		}
		for _, s := range f.servers {
			if s["name"] == req.Name {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				w.Write(backendtest.Fixture(f.T, "error_uniqueness.json"))
				return
			}
		}
		sid := f.newID()
		s := f.Object("server.json")
		s["id"], s["name"], s["status"] = sid, req.Name, "initializing"
		if req.Labels != nil {
			s["labels"] = *req.Labels
		}
		s["server_type"].(map[string]any)["name"] = req.ServerType.Name
		s["location"].(map[string]any)["name"] = req.Location
		s["image"].(map[string]any)["name"] = req.Image.Name
		setAddrs(s, sid)
		f.servers[sid] = s
		f.userData[req.Name] = req.UserData
		started := func() { s["status"] = "starting"; f.serverGets[sid] = 0 }
		create := f.newAction("create_server", sid, "server", nil)
		start := f.newAction("start_server", sid, "server", started)
		backendtest.Reply(w, http.StatusCreated, map[string]any{"server": s, "action": create, "next_actions": []any{start}, "root_password": nil})
	case r.Method == http.MethodGet && parts[0] == "servers" && len(parts) == 2:
		s, ok := f.servers[id]
		if !ok {
			f.notFound(w, "server", id)
			return
		}
		// Time passes between looks: an initializing server's actions
		// finish, and a started server runs from the second look on.
		if s["status"] == "initializing" {
			for _, a := range f.actions {
				if a.Obj["status"] == "running" && a.Obj["resources"].([]any)[0].(map[string]any)["id"] == id {
					a.Polls = 1
					a.Finish(map[string]any{"status": "success"})
				}
			}
		}
		if s["status"] == "starting" {
			if f.serverGets[id]++; f.serverGets[id] > 1 {
				s["status"] = "running"
			}
		}
		backendtest.Reply(w, 200, map[string]any{"server": s})
	case r.Method == http.MethodPut && parts[0] == "servers" && len(parts) == 2:
		s, ok := f.servers[id]
		if !ok {
			f.notFound(w, "server", id)
			return
		}
		var req schema.ServerUpdateRequest
		f.Decode(r, body, &req)
		if req.Name != "" {
			s["name"] = req.Name
		}
		if req.Labels != nil {
			s["labels"] = *req.Labels
		}
		backendtest.Reply(w, 200, map[string]any{"server": s})
	case r.Method == http.MethodDelete && parts[0] == "servers" && len(parts) == 2:
		if _, ok := f.servers[id]; !ok {
			f.notFound(w, "server", id)
			return
		}
		f.servers[id]["status"] = "deleting"
		a := f.newAction("delete_server", id, "server", func() { delete(f.servers, id) })
		backendtest.Reply(w, 200, map[string]any{"action": a})
	case r.Method == http.MethodGet && r.URL.Path == "/actions":
		var out []map[string]any
		for _, v := range q["id"] {
			aid, _ := strconv.ParseInt(v, 10, 64)
			a, ok := f.actions[aid]
			if !ok {
				continue
			}
			// Running at the first poll, done at the second.
			a.Poll("running", map[string]any{"status": "success", "progress": 100, "finished": time.Now().Format(time.RFC3339)})
			out = append(out, a.Obj)
		}
		backendtest.Reply(w, 200, list("actions", out))
	case r.Method == http.MethodGet && r.URL.Path == "/firewalls":
		backendtest.Reply(w, 200, listNamed("firewalls", f.firewalls, q, nil))
	case r.Method == http.MethodPost && r.URL.Path == "/firewalls":
		var req schema.FirewallCreateRequest
		f.Decode(r, body, &req)
		fid := f.newID()
		fw := f.Object("firewall.json")
		fw["id"], fw["name"] = fid, req.Name
		if req.Labels != nil {
			fw["labels"] = *req.Labels
		}
		fw["rules"] = rulesOut(req.Rules)
		fw["applied_to"] = appliedOut(req.ApplyTo)
		f.firewalls[fid] = fw
		var actions []any
		if len(req.ApplyTo) > 0 {
			actions = append(actions, f.newAction("apply_firewall", fid, "firewall", nil))
		}
		backendtest.Reply(w, http.StatusCreated, map[string]any{"firewall": fw, "actions": actions})
	case parts[0] == "firewalls" && len(parts) >= 2:
		fw, ok := f.firewalls[id]
		if !ok {
			f.notFound(w, "firewall", id)
			return
		}
		switch {
		case r.Method == http.MethodGet && len(parts) == 2:
			backendtest.Reply(w, 200, map[string]any{"firewall": fw})
		case r.Method == http.MethodPut && len(parts) == 2:
			var req schema.FirewallUpdateRequest
			f.Decode(r, body, &req)
			if req.Labels != nil {
				fw["labels"] = *req.Labels
			}
			backendtest.Reply(w, 200, map[string]any{"firewall": fw})
		case r.Method == http.MethodDelete && len(parts) == 2:
			if len(fw["applied_to"].([]any)) > 0 {
				backendtest.Reply(w, http.StatusUnprocessableEntity, map[string]any{"error": map[string]any{"code": "resource_in_use", "message": "firewall is still in use", "details": nil}})
				return
			}
			delete(f.firewalls, id)
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "set_rules":
			var req schema.FirewallActionSetRulesRequest
			f.Decode(r, body, &req)
			fw["rules"] = rulesOut(req.Rules)
			backendtest.Reply(w, 201, map[string]any{"actions": []any{f.newAction("set_firewall_rules", id, "firewall", nil)}})
		case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "apply_to_resources":
			var req schema.FirewallActionApplyToResourcesRequest
			f.Decode(r, body, &req)
			fw["applied_to"] = append(fw["applied_to"].([]any), appliedOut(req.ApplyTo)...)
			backendtest.Reply(w, 201, map[string]any{"actions": []any{f.newAction("apply_firewall", id, "firewall", nil)}})
		case r.Method == http.MethodPost && len(parts) == 4 && parts[3] == "remove_from_resources":
			var req schema.FirewallActionRemoveFromResourcesRequest
			f.Decode(r, body, &req)
			gone := map[string]bool{}
			for _, x := range appliedOut(req.RemoveFrom) {
				gone[resKey(x)] = true
			}
			fw["applied_to"] = slices.DeleteFunc(fw["applied_to"].([]any), func(x any) bool { return gone[resKey(x)] })
			backendtest.Reply(w, 201, map[string]any{"actions": []any{f.newAction("remove_firewall", id, "firewall", nil)}})
		default:
			http.Error(w, "unexpected", http.StatusMethodNotAllowed)
		}
	default:
		f.T.Errorf("fake hcloud API: unexpected %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", http.StatusNotFound)
	}
}

// rulesOut are request rules as the API shows them.
func rulesOut(rules []schema.FirewallRuleRequest) []any {
	out := []any{}
	for _, r := range rules {
		out = append(out, map[string]any{
			"direction": r.Direction, "protocol": r.Protocol, "port": r.Port,
			"source_ips": nonNil(r.SourceIPs), "destination_ips": nonNil(r.DestinationIPs), "description": r.Description,
		})
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func appliedOut(res []schema.FirewallResource) []any {
	out := []any{}
	for _, r := range res {
		m := map[string]any{"type": r.Type}
		if r.LabelSelector != nil {
			m["label_selector"] = map[string]any{"selector": r.LabelSelector.Selector}
			m["applied_to_resources"] = []any{}
		}
		if r.Server != nil {
			m["server"] = map[string]any{"id": r.Server.ID}
		}
		out = append(out, m)
	}
	return out
}

func resKey(x any) string {
	b, _ := json.Marshal(maps.Collect(func(yield func(string, any) bool) {
		for k, v := range x.(map[string]any) {
			if k != "applied_to_resources" && !yield(k, v) {
				return
			}
		}
	}))
	return string(b)
}
