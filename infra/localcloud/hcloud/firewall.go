package hcloud

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"time"
)

type firewallResource struct {
	Type   string `json:"type"`
	Server *struct {
		ID int64 `json:"id"`
	} `json:"server"`
	LabelSelector *struct {
		Selector string `json:"selector"`
	} `json:"label_selector"`
}

// toApplied checks resources and turns them into records; field names the
// request field for errors.
func (s *Server) toApplied(field string, res []firewallResource) ([]applied, *apiError) {
	out := make([]applied, 0, len(res))
	for _, r := range res {
		switch r.Type {
		case "server":
			if r.Server == nil {
				return nil, errInvalid(field, "a server resource needs server.id")
			}
			if _, ok := s.st.Servers[r.Server.ID]; !ok {
				return nil, errNotFound("server", r.Server.ID)
			}
			out = append(out, applied{Type: "server", ServerID: r.Server.ID})
		case "label_selector":
			if r.LabelSelector == nil {
				return nil, errInvalid(field, "a label_selector resource needs label_selector.selector")
			}
			if _, err := parseSelector(r.LabelSelector.Selector); err != nil || r.LabelSelector.Selector == "" {
				return nil, errInvalid(field, fmt.Sprintf("label selector %q: %v", r.LabelSelector.Selector, err))
			}
			out = append(out, applied{Type: "label_selector", LabelSelector: r.LabelSelector.Selector})
		default:
			return nil, errInvalid(field, fmt.Sprintf("resource type %q: want server or label_selector", r.Type))
		}
	}
	return out, nil
}

var protocols = []string{"tcp", "udp", "icmp", "esp", "gre"}

var portRE = regexp.MustCompile(`^(any|[0-9]{1,5}(-[0-9]{1,5})?)$`)

func checkRules(rules []rule) *apiError {
	if len(rules) > 50 {
		return errInvalid("rules", "at most 50 rules")
	}
	for i := range rules {
		r := &rules[i]
		if r.Direction != "in" && r.Direction != "out" {
			return errInvalid("rules", fmt.Sprintf("rule %d: direction %q: want in or out", i, r.Direction))
		}
		if !slices.Contains(protocols, r.Protocol) {
			return errInvalid("rules", fmt.Sprintf("rule %d: protocol %q: want tcp, udp, icmp, esp or gre", i, r.Protocol))
		}
		if (r.Protocol == "tcp" || r.Protocol == "udp") != (r.Port != nil && *r.Port != "") {
			return errInvalid("rules", fmt.Sprintf("rule %d: port: wanted for tcp and udp only", i))
		}
		if r.Port != nil && *r.Port != "" && !portRE.MatchString(*r.Port) {
			return errInvalid("rules", fmt.Sprintf("rule %d: port %q: want PORT, FIRST-LAST or any", i, *r.Port))
		}
		ips := r.SourceIPs
		if r.Direction == "out" {
			ips = r.DestinationIPs
		}
		if len(ips) == 0 {
			return errInvalid("rules", fmt.Sprintf("rule %d: an %s rule needs %s", i, r.Direction, map[string]string{"in": "source_ips", "out": "destination_ips"}[r.Direction]))
		}
		for _, list := range [][]string{r.SourceIPs, r.DestinationIPs} {
			for _, ip := range list {
				if _, err := netip.ParsePrefix(ip); err != nil {
					return errInvalid("rules", fmt.Sprintf("rule %d: %q: want CIDR notation", i, ip))
				}
			}
		}
		if r.SourceIPs == nil {
			r.SourceIPs = []string{}
		}
		if r.DestinationIPs == nil {
			r.DestinationIPs = []string{}
		}
	}
	return nil
}

func (s *Server) appliesTo(fw *firewall, srv *server) bool {
	for _, a := range fw.AppliedTo {
		if a.Type == "server" && a.ServerID == srv.ID {
			return true
		}
		if a.Type == "label_selector" {
			if sel, err := parseSelector(a.LabelSelector); err == nil && sel.matches(srv.Labels) {
				return true
			}
		}
	}
	return false
}

func (s *Server) firewallJSON(fw *firewall) map[string]any {
	applied := []any{}
	for _, a := range fw.AppliedTo {
		switch a.Type {
		case "server":
			applied = append(applied, map[string]any{"type": "server", "server": map[string]any{"id": a.ServerID}})
		case "label_selector":
			sel, _ := parseSelector(a.LabelSelector)
			res := []any{}
			for _, srv := range sortedByID(s.st.Servers) {
				if sel.matches(srv.Labels) {
					res = append(res, map[string]any{"type": "server", "server": map[string]any{"id": srv.ID}})
				}
			}
			applied = append(applied, map[string]any{"type": "label_selector", "label_selector": map[string]any{"selector": a.LabelSelector}, "applied_to_resources": res})
		}
	}
	rules := fw.Rules
	if rules == nil {
		rules = []rule{}
	}
	return map[string]any{
		"id": fw.ID, "name": fw.Name, "labels": orNoLabels(fw.Labels), "created": fw.Created.Format(time.RFC3339),
		"rules": rules, "applied_to": applied,
	}
}

func (s *Server) listFirewalls(q map[string][]string) (int, any, *apiError) {
	sel, err := parseSelector(first(q["label_selector"]))
	if err != nil {
		return 0, nil, errInvalid("label_selector", err.Error())
	}
	var out []map[string]any
	for _, fw := range sortedByID(s.st.Firewalls) {
		if name := first(q["name"]); name != "" && fw.Name != name {
			continue
		}
		if sel.matches(fw.Labels) {
			out = append(out, s.firewallJSON(fw))
		}
	}
	return paged(q, "firewalls", out)
}

func (s *Server) createFirewall(body []byte) (int, any, *apiError) {
	var req struct {
		Name    string             `json:"name"`
		Labels  *map[string]string `json:"labels"`
		Rules   []rule             `json:"rules"`
		ApplyTo []firewallResource `json:"apply_to"`
	}
	if e := decode(body, &req); e != nil {
		return 0, nil, e
	}
	if req.Name == "" || len(req.Name) > 128 {
		return 0, nil, errInvalid("name", "must be 1-128 characters")
	}
	for _, fw := range s.st.Firewalls {
		if fw.Name == req.Name {
			return 0, nil, errUnique("firewall", "name")
		}
	}
	labels := map[string]string{}
	if req.Labels != nil && *req.Labels != nil {
		labels = *req.Labels
	}
	if err := validLabels(labels); err != nil {
		return 0, nil, errInvalid("labels", err.Error())
	}
	if e := checkRules(req.Rules); e != nil {
		return 0, nil, e
	}
	app, e := s.toApplied("apply_to", req.ApplyTo)
	if e != nil {
		return 0, nil, e
	}
	fw := &firewall{ID: s.newID(), Name: req.Name, Labels: maps.Clone(labels), Created: s.now().UTC().Truncate(time.Second), Rules: req.Rules, AppliedTo: app}
	s.st.Firewalls[fw.ID] = fw
	actions := []any{}
	if len(app) > 0 {
		actions = append(actions, s.newAction("apply_firewall", true, resRef{fw.ID, "firewall"}).json())
	}
	return http.StatusCreated, map[string]any{"firewall": s.firewallJSON(fw), "actions": actions}, nil
}

func (s *Server) updateFirewall(fw *firewall, body []byte) (int, any, *apiError) {
	var req struct {
		Name   *string            `json:"name"`
		Labels *map[string]string `json:"labels"`
	}
	if e := decode(body, &req); e != nil {
		return 0, nil, e
	}
	if req.Name != nil && *req.Name != fw.Name {
		for _, o := range s.st.Firewalls {
			if o.Name == *req.Name {
				return 0, nil, errUnique("firewall", "name")
			}
		}
		if *req.Name == "" {
			return 0, nil, errInvalid("name", "must be 1-128 characters")
		}
		fw.Name = *req.Name
	}
	if req.Labels != nil {
		l := orNoLabels(*req.Labels)
		if err := validLabels(l); err != nil {
			return 0, nil, errInvalid("labels", err.Error())
		}
		fw.Labels = maps.Clone(l)
	}
	return 200, map[string]any{"firewall": s.firewallJSON(fw)}, nil
}

func (s *Server) firewallAction(fw *firewall, name string, body []byte) (int, any, *apiError) {
	ref := resRef{fw.ID, "firewall"}
	switch name {
	case "set_rules":
		var req struct {
			Rules []rule `json:"rules"`
		}
		if e := decode(body, &req); e != nil {
			return 0, nil, e
		}
		if e := checkRules(req.Rules); e != nil {
			return 0, nil, e
		}
		fw.Rules = req.Rules
		return http.StatusCreated, map[string]any{"actions": []any{s.newAction("set_firewall_rules", true, ref).json()}}, nil
	case "apply_to_resources", "remove_from_resources":
		var req struct {
			ApplyTo    []firewallResource `json:"apply_to"`
			RemoveFrom []firewallResource `json:"remove_from"`
		}
		if e := decode(body, &req); e != nil {
			return 0, nil, e
		}
		field, res := "apply_to", req.ApplyTo
		if name == "remove_from_resources" {
			field, res = "remove_from", req.RemoveFrom
		}
		app, e := s.toApplied(field, res)
		if e != nil {
			return 0, nil, e
		}
		var actions []any
		for _, a := range app {
			has := slices.Contains(fw.AppliedTo, a)
			if name == "apply_to_resources" {
				if has {
					return 0, nil, &apiError{http.StatusUnprocessableEntity, "firewall_already_applied", "firewall is already applied to the resource", nil}
				}
				fw.AppliedTo = append(fw.AppliedTo, a)
				actions = append(actions, s.newAction("apply_firewall", true, ref).json())
				continue
			}
			if !has {
				return 0, nil, &apiError{http.StatusUnprocessableEntity, "firewall_already_removed", "firewall is not applied to the resource", nil}
			}
			fw.AppliedTo = slices.DeleteFunc(fw.AppliedTo, func(x applied) bool { return x == a })
			actions = append(actions, s.newAction("remove_firewall", true, ref).json())
		}
		if actions == nil {
			actions = []any{}
		}
		return http.StatusCreated, map[string]any{"actions": actions}, nil
	}
	return 0, nil, &apiError{http.StatusNotFound, "not_found", "no such firewall action: " + name, nil}
}
