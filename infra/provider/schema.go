package provider

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	p "github.com/pulumi/pulumi-go-provider"
)

// A resource's args struct is its schema: each field is one input, named
// by its pulumi tag, and says by a tag what a change of it does:
//
//   - provider:"replaceOnChanges" (pulumi-go-provider's own tag, which also
//     marks the property in the schema) replaces the resource;
//   - diff:"inPlace" updates it in place (the resource's Update).
//
// Every input carries exactly one of the two (TestEveryInputIsClassified).
// diffInputs reads them, so a Diff never lists field names.
const (
	replaceTag   = "replaceOnChanges"
	diffTagKey   = "diff"
	diffTagPlace = "inPlace"
)

// input is one input field of an args struct.
type input struct {
	name    string // the pulumi name
	index   int    // the field's index in the struct
	replace bool   // tagged: a change replaces the resource
	inPlace bool   // tagged: a change updates it in place
}

// inputsOf lists the inputs of args struct t with their classification,
// and an error naming each field classified neither way, or both.
func inputsOf(t reflect.Type) ([]input, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v: not a struct", t)
	}
	var ins []input
	var errs []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		replace := slices.Contains(strings.Split(f.Tag.Get("provider"), ","), replaceTag)
		inPlace := slices.Contains(strings.Split(f.Tag.Get(diffTagKey), ","), diffTagPlace)
		switch {
		case replace && inPlace:
			errs = append(errs, fmt.Sprintf("%s.%s: both replaced and updated in place on a change", t.Name(), f.Name))
		case !replace && !inPlace:
			errs = append(errs, fmt.Sprintf("%s.%s: no tag says what its change does: add provider:%q or %s:%q", t.Name(), f.Name, replaceTag, diffTagKey, diffTagPlace))
		}
		ins = append(ins, input{name: name, index: i, replace: replace, inPlace: inPlace})
	}
	if len(errs) > 0 {
		return ins, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return ins, nil
}

// diffInputs compares two values of an args struct input by input: a
// changed input tagged replaceOnChanges is an UpdateReplace, one tagged
// inPlace an Update. An empty list or map equals a missing one, as they do
// on the wire. The replacement, if any, is made before the old resource
// goes (DeleteBeforeReplace false).
func diffInputs[A any](old, new A) (p.DiffResponse, error) {
	d := p.DiffResponse{DetailedDiff: map[string]p.PropertyDiff{}}
	ins, err := inputsOf(reflect.TypeFor[A]())
	if err != nil {
		return d, err
	}
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	for _, in := range ins {
		if equalInput(ov.Field(in.index), nv.Field(in.index)) {
			continue
		}
		kind := p.Update
		if in.replace {
			kind = p.UpdateReplace
		}
		d.HasChanges = true
		d.DetailedDiff[in.name] = p.PropertyDiff{Kind: kind, InputDiff: true}
	}
	return d, nil
}

// equalInput reports whether two values of an input are the same: a nil
// list or map equals an empty one.
func equalInput(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			return true
		}
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}
