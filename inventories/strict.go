package inventories

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is a problem with one field of one file. Its text is a single line:
// "FILE:LINE: FIELD: MESSAGE".
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// fieldError is a validation failure before it knows its file and line:
// Path is the dotted field path ("steady[0].count") that document.errorAt
// turns into a line.
type fieldError struct {
	Path string
	Msg  string
}

func (e *fieldError) Error() string { return e.Path + ": " + e.Msg }

func fieldErr(path, format string, args ...any) error {
	return &fieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// document is one decoded file and the line of every field in it.
type document struct {
	file  string
	lines map[string]int
}

// decodeStrict decodes YAML data into v (a pointer to a struct), checking
// that `version: 1` is present and that every key names a field of v.
func decodeStrict(file string, data []byte, v any) (*document, error) {
	d := &document{file: file, lines: map[string]int{}}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Field: "version", Msg: "file is empty; want a document starting with version: 1"}
		}
		return nil, &Error{File: file, Line: yamlErrLine(err), Msg: "not valid YAML: " + yamlErrMsg(err)}
	}
	n := &root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: n.Line, Msg: "want a mapping with version: 1 at the top"}
	}
	version, line := "", 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "version" {
			version, line = n.Content[i+1].Value, n.Content[i+1].Line
		}
	}
	switch version {
	case "1":
	case "":
		return nil, &Error{File: file, Line: 1, Field: "version", Msg: "missing; want version: 1"}
	default:
		return nil, &Error{File: file, Line: line, Field: "version", Msg: fmt.Sprintf("unsupported version %q; this relayfleet reads version 1", version)}
	}
	if err := d.decode(n, reflect.ValueOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	return d, nil
}

// errorAt turns a validation error into an *Error with the line of its
// field, or of the nearest enclosing field that has one.
func (d *document) errorAt(err error) error {
	var fe *fieldError
	if !errors.As(err, &fe) {
		return &Error{File: d.file, Msg: err.Error()}
	}
	return &Error{File: d.file, Line: d.line(fe.Path), Field: fe.Path, Msg: fe.Msg}
}

func (d *document) line(path string) int {
	for p := path; ; {
		if l, ok := d.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return d.lines[""]
		}
		p = p[:i]
	}
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *document) decode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.lines[path] = n.Line
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, path, "want a single value, got a %s", kindName(n))
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return d.errorf(n, path, "%s", yamlErrMsg(err))
		}
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // leave the zero value
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return d.errorf(n, path, "want a mapping of keys, got a %s", kindName(n))
		}
		fields := structFields(v.Type())
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			idx, ok := fields[k.Value]
			if !ok {
				where := "at the top"
				if path != "" {
					where = "in " + path
				}
				return &Error{File: d.file, Line: k.Line, Field: join(path, k.Value), Msg: fmt.Sprintf("unknown key %q %s (known: %s)", k.Value, where, knownKeys(fields))}
			}
			if seen[k.Value] {
				return &Error{File: d.file, Line: k.Line, Field: join(path, k.Value), Msg: "key given twice"}
			}
			seen[k.Value] = true
			if err := d.decode(val, v.FieldByIndex(idx), join(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, path, "want a list, got a %s", kindName(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return d.errorf(n, path, "want a mapping, got a %s", kindName(n))
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				return &Error{File: d.file, Line: k.Line, Field: join(path, k.Value), Msg: "key given twice"}
			}
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.decode(val, e, join(path, k.Value)); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
		}
		v.Set(m)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return d.errorf(n, path, "want a single value, got a %s", kindName(n))
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return d.errorf(n, path, "want %s, got %q", typeName(v.Kind()), n.Value)
	}
	return nil
}

func (d *document) errorf(n *yaml.Node, path, format string, args ...any) error {
	return &Error{File: d.file, Line: n.Line, Field: path, Msg: fmt.Sprintf(format, args...)}
}

// structFields maps each YAML key of t to its field index path, following
// `yaml:",inline"` embedded structs.
func structFields(t reflect.Type) map[string][]int {
	m := map[string][]int{}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			idx := append(slices.Clone(prefix), i)
			if opts == "inline" && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			m[name] = idx
		}
	}
	walk(t, nil)
	return m
}

// knownKeys lists the keys in the struct's field order, which reads better
// than sorted.
func knownKeys(fields map[string][]int) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return slices.Compare(fields[a], fields[b]) })
	return strings.Join(keys, ", ")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		return "value " + strconv.Quote(n.Value)
	}
}

func typeName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text"
	}
	return k.String()
}

// yamlErrMsg strips yaml.v3's "yaml: line N: " prefixes so that the
// message fits our FILE:LINE: form.
func yamlErrMsg(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: ")
	if strings.HasPrefix(s, "line ") {
		if _, rest, ok := strings.Cut(s, ": "); ok {
			s = rest
		}
	}
	return strings.ReplaceAll(s, "\n", " ")
}

func yamlErrLine(err error) int {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		num, _, _ := strings.Cut(rest, ":")
		if n, err := strconv.Atoi(num); err == nil {
			return n
		}
	}
	return 0
}

// ExitCode is 2: a fleet file's error is bad input, as a bad flag is.
func (e *Error) ExitCode() int { return 2 }
