package hcloud

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// selector is a parsed Hetzner label selector: terms joined by commas,
// all of which must hold.
type selector []term

type term struct {
	key    string
	op     string // "=", "!=", "exists", "!exists", "in", "notin"
	values []string
}

// parseSelector parses a label selector as the API documents it: k=v,
// k==v, k!=v, k, !k, k in (a,b), k notin (a,b).
func parseSelector(s string) (selector, error) {
	var sel selector
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, raw := range splitTerms(s) {
		t := strings.TrimSpace(raw)
		var tm term
		switch {
		case strings.HasPrefix(t, "!"):
			tm = term{key: strings.TrimSpace(t[1:]), op: "!exists"}
		case strings.Contains(t, "!="):
			k, v, _ := strings.Cut(t, "!=")
			tm = term{key: strings.TrimSpace(k), op: "!=", values: []string{strings.TrimSpace(v)}}
		case strings.Contains(t, "=="):
			k, v, _ := strings.Cut(t, "==")
			tm = term{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}
		case strings.Contains(t, "="):
			k, v, _ := strings.Cut(t, "=")
			tm = term{key: strings.TrimSpace(k), op: "=", values: []string{strings.TrimSpace(v)}}
		case strings.HasSuffix(t, ")"):
			f := strings.Fields(t[:strings.Index(t, "(")])
			if len(f) != 2 || (f[1] != "in" && f[1] != "notin") {
				return nil, fmt.Errorf("label selector term %q: want KEY in (V1,V2) or KEY notin (V1,V2)", t)
			}
			inner := t[strings.Index(t, "(")+1 : len(t)-1]
			var vals []string
			for v := range strings.SplitSeq(inner, ",") {
				vals = append(vals, strings.TrimSpace(v))
			}
			tm = term{key: f[0], op: f[1], values: vals}
		default:
			tm = term{key: t, op: "exists"}
		}
		if err := validKey(tm.key); err != nil {
			return nil, fmt.Errorf("label selector term %q: %v", t, err)
		}
		for _, v := range tm.values {
			if err := validValue(v); err != nil {
				return nil, fmt.Errorf("label selector term %q: %v", t, err)
			}
		}
		sel = append(sel, tm)
	}
	return sel, nil
}

// splitTerms splits at commas outside parentheses.
func splitTerms(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func (sel selector) matches(labels map[string]string) bool {
	for _, t := range sel {
		v, ok := labels[t.key]
		switch t.op {
		case "=":
			if !ok || v != t.values[0] {
				return false
			}
		case "!=":
			if ok && v == t.values[0] {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		case "in":
			if !ok || !slices.Contains(t.values, v) {
				return false
			}
		case "notin":
			if ok && slices.Contains(t.values, v) {
				return false
			}
		}
	}
	return true
}

var (
	labelName   = regexp.MustCompile(`^([a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?)$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// validKey checks a label key: an optional DNS-subdomain prefix and a slash,
// then a name of at most 63 characters.
func validKey(k string) error {
	name := k
	if p, n, ok := strings.Cut(k, "/"); ok {
		if !labelPrefix.MatchString(p) || strings.HasPrefix(p, "hetzner.cloud") {
			return fmt.Errorf("label key %q: bad prefix", k)
		}
		name = n
	}
	if !labelName.MatchString(name) {
		return fmt.Errorf("label key %q: want at most 63 of a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric", k)
	}
	return nil
}

// validValue checks a label value: empty, or like a key's name.
func validValue(v string) error {
	if v != "" && !labelName.MatchString(v) {
		return fmt.Errorf("label value %q: want at most 63 of a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric", v)
	}
	return nil
}

func validLabels(labels map[string]string) error {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return err
		}
		if err := validValue(labels[k]); err != nil {
			return err
		}
	}
	return nil
}
