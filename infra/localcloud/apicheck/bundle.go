package apicheck

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"
)

// LoadBundled reads an OpenAPI description written as many YAML files
// (root and the files it $refs, as DigitalOcean publishes theirs), keeps
// the paths equal to or under one of keep (nil keeps all: a request
// elsewhere then finds no route and fails its check), inlines every $ref
// and checks the result with kin-openapi. Like Load, it drops path-level
// servers and renames lower-case status ranges.
func LoadBundled(root string, keep []string) (*openapi3.T, error) {
	b := &bundler{files: map[string]any{}, cyclic: map[string]string{}, saved: map[string]any{}}
	top, err := b.file(root)
	if err != nil {
		return nil, err
	}
	r := maps.Clone(top.(map[string]any))
	delete(r, "tags")
	paths := map[string]any{}
	for p, item := range r["paths"].(map[string]any) {
		if keep == nil || slices.ContainsFunc(keep, func(f string) bool { return p == f || strings.HasPrefix(p, f+"/") }) {
			paths[p] = item
		}
	}
	r["paths"] = paths
	resolved, err := b.resolve(r, root)
	if err != nil {
		return nil, err
	}
	comps, _ := resolved.(map[string]any)["components"].(map[string]any)
	if comps == nil {
		comps = map[string]any{}
		resolved.(map[string]any)["components"] = comps
	}
	schemas, _ := comps["schemas"].(map[string]any)
	if schemas == nil {
		schemas = map[string]any{}
		comps["schemas"] = schemas
	}
	maps.Copy(schemas, b.saved)
	data, err := json.Marshal(resolved)
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromDataWithPath(data, &url.URL{Path: root})
	if err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: %w", root, err)
	}
	if err := doc.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("OpenAPI document %s: does not validate: %w", root, err)
	}
	// Match paths on any host: Check uses the base given to New.
	doc.Servers = nil
	normalize(doc)
	return doc, nil
}

// bundler reads an OpenAPI description written as many files. DigitalOcean
// writes its description so, and $refs whole operations and tag
// descriptions into the root, which OpenAPI 3.0 does not allow (their
// tooling bundles it before publishing). The bundler does the same: it inlines every $ref, files and JSON pointers alike, so that
// kin-openapi reads one plain document. Nothing else is changed, except
// that what only documents (the root's tags, x-codeSamples, a media
// type's named examples) is left out.
//
// A schema that contains itself (DigitalOcean has a few) is inlined down
// to where it recurs, which refers to one copy kept in
// components.schemas.
type bundler struct {
	files  map[string]any
	stack  []string
	cyclic map[string]string // file#pointer -> its components.schemas name
	saved  map[string]any    // components.schemas name -> the schema
}

func (b *bundler) file(path string) (any, error) {
	if v, ok := b.files[path]; ok {
		return v, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	b.files[path] = v
	return v, nil
}

// pointer follows a JSON pointer ("/a/b~1c") in v.
func pointer(v any, ptr string) (any, error) {
	if ptr == "" || ptr == "/" {
		return v, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("pointer %s: %q is not in an object", ptr, tok)
		}
		if v, ok = m[tok]; !ok {
			return nil, fmt.Errorf("pointer %s: no %q", ptr, tok)
		}
	}
	return v, nil
}

func (b *bundler) resolve(v any, file string) (any, error) {
	switch n := v.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			target, ptr, _ := strings.Cut(ref, "#")
			target = filepath.Join(filepath.Dir(file), target)
			if ref[0] == '#' {
				target = file
			}
			key := target + "#" + ptr
			if slices.Contains(b.stack, key) {
				name, ok := b.cyclic[key]
				if !ok {
					name = fmt.Sprintf("cyclic%d_%s", len(b.cyclic), componentName(filepath.Base(key)))
					b.cyclic[key] = name
				}
				return map[string]any{"$ref": "#/components/schemas/" + name}, nil
			}
			root, err := b.file(target)
			if err != nil {
				return nil, err
			}
			t, err := pointer(root, ptr)
			if err != nil {
				return nil, fmt.Errorf("%s: $ref %s: %w", file, ref, err)
			}
			b.stack = append(b.stack, key)
			r, err := b.resolve(t, target)
			b.stack = b.stack[:len(b.stack)-1]
			if name, ok := b.cyclic[key]; ok && err == nil && b.saved[name] == nil {
				b.saved[name] = r
			}
			return r, err
		}
		out := make(map[string]any, len(n))
		if all, isList := n["allOf"].([]any); isList {
			// DigitalOcean documents a $ref'd property with a second allOf
			// member that holds only a description (and an example). That
			// member constrains nothing, yet under OpenAPI 3.0 it refuses
			// null (it lacks nullable) even where the first allows it
			// (next_backup_window, tags): leave it out, as their intent is.
			n = maps.Clone(n)
			n["allOf"] = slices.DeleteFunc(slices.Clone(all), func(m any) bool {
				mm, isMap := m.(map[string]any)
				if !isMap || mm["description"] == nil {
					return false
				}
				for k := range mm {
					if k != "description" && k != "example" {
						return false
					}
				}
				return true
			})
		}
		for _, k := range slices.Sorted(maps.Keys(n)) {
			if k == "x-codeSamples" || (k == "examples" && n["schema"] != nil) {
				continue
			}
			if d, ok := n[k].(map[string]any); ok && k == "discriminator" && d["mapping"] != nil {
				// A mapping names schemas by reference: each becomes a
				// component, named after its file and pointer.
				d = maps.Clone(d)
				mapping := map[string]any{}
				for v, ref := range d["mapping"].(map[string]any) {
					r, err := b.resolve(map[string]any{"$ref": ref}, file)
					if err != nil {
						return nil, err
					}
					name := componentName(fmt.Sprint(ref))
					b.saved[name] = r
					mapping[v] = "#/components/schemas/" + name
				}
				d["mapping"] = mapping
				out[k] = d
				continue
			}
			r, err := b.resolve(n[k], file)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case map[any]any:
		m := make(map[string]any, len(n))
		for k, x := range n {
			m[fmt.Sprint(k)] = x
		}
		return b.resolve(m, file)
	case []any:
		out := make([]any, len(n))
		for i, x := range n {
			r, err := b.resolve(x, file)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// componentName is the components.schemas name of the schema ref points
// at: its file and pointer, with the separators made underscores.
func componentName(ref string) string {
	return strings.NewReplacer("#", "_", "/", "_", ".", "_").Replace(strings.TrimPrefix(ref, "./"))
}
