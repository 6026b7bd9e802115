package provider

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"
)

// resourceArgs are the args structs of the provider's resources: each is
// its resource's schema.
var resourceArgs = map[string]reflect.Type{
	BoxType:      reflect.TypeFor[BoxArgs](),
	HostType:     reflect.TypeFor[HostArgs](),
	FirewallType: reflect.TypeFor[FirewallArgs](),
}

// TestEveryInputIsClassified walks each resource's args struct: every
// input says what its change does, replace or update in place, and only
// one. A Host is converged again on any change (hostDiff never replaces),
// so its inputs are all in place.
func TestEveryInputIsClassified(t *testing.T) {
	for typ, at := range resourceArgs {
		ins, err := inputsOf(at)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		if len(ins) < 4 {
			t.Errorf("%s: %d inputs found: the walk misses the struct's fields", typ, len(ins))
		}
		if typ != HostType {
			continue
		}
		for _, in := range ins {
			if in.replace {
				t.Errorf("%s: %s is tagged replaceOnChanges, but a Host is converged, never replaced", typ, in.name)
			}
		}
	}
}

// TestInputsOfRefusesUnclassified: a field with no classification, or
// both, is named in the error; one with a classification passes.
func TestInputsOfRefusesUnclassified(t *testing.T) {
	type args struct {
		Plain string `pulumi:"plain"`
		Both  string `pulumi:"both" provider:"replaceOnChanges" diff:"inPlace"`
		Place string `pulumi:"place,optional" diff:"inPlace"`
		Repl  string `pulumi:"repl" provider:"secret,replaceOnChanges"`
	}
	_, err := inputsOf(reflect.TypeFor[args]())
	if err == nil || !strings.Contains(err.Error(), "args.Plain") || !strings.Contains(err.Error(), "args.Both") ||
		strings.Contains(err.Error(), "args.Place") || strings.Contains(err.Error(), "args.Repl") {
		t.Fatalf("error %v, want Plain and Both named, and only them", err)
	}
	if _, err := diffInputs(args{}, args{Place: "x"}); err == nil {
		t.Fatal("diffInputs took an args struct with an unclassified field")
	}
}

// TestDiffInputsFollowsTheTags: each Box input, changed alone, is a
// replace when tagged replaceOnChanges and an update otherwise, under its
// pulumi name; nil and empty lists and maps are the same.
func TestDiffInputsFollowsTheTags(t *testing.T) {
	ins, err := inputsOf(reflect.TypeFor[BoxArgs]())
	if err != nil {
		t.Fatal(err)
	}
	base := testBox(BackendHcloud)
	for _, in := range ins {
		n := base
		f := reflect.ValueOf(&n).Elem().Field(in.index)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "-changed")
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("ssh-ed25519 AAAA another")))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"other": "label"}))
		default:
			t.Fatalf("%s: kind %s not covered", in.name, f.Kind())
		}
		d, err := boxDiff(base, n)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Update
		if in.replace {
			want = p.UpdateReplace
		}
		if !d.HasChanges || len(d.DetailedDiff) != 1 || d.DetailedDiff[in.name].Kind != want || d.DeleteBeforeReplace {
			t.Errorf("%s changed: %+v, want %s alone", in.name, d, want)
		}
	}
	empty := base
	empty.Labels, empty.AuthorizedKeys = map[string]string{}, []string{}
	nilled := base
	nilled.Labels, nilled.AuthorizedKeys = nil, nil
	if d, err := diffInputs(empty, nilled); err != nil || d.HasChanges {
		t.Errorf("empty and nil lists: %+v %v, want no change", d, err)
	}
}

// TestSchemaMarksReplaceOnChanges: the tags reach the schema, where
// pulumi-go-provider puts replaceOnChanges, for the Box's inputs alone.
func TestSchemaMarksReplaceOnChanges(t *testing.T) {
	resources := schemaResources(t, newServer(t))
	for typ, at := range resourceArgs {
		ins, err := inputsOf(at)
		if err != nil {
			t.Fatal(err)
		}
		props := resources[typ].InputProperties
		if len(props) != len(ins) {
			t.Errorf("%s: %d inputs in the schema, %d in the struct", typ, len(props), len(ins))
		}
		for _, in := range ins {
			if got := props[in.name].ReplaceOnChanges; got != in.replace {
				t.Errorf("%s.%s: schema replaceOnChanges %v, tag %v", typ, in.name, got, in.replace)
			}
		}
	}
}

// argsProps is an args struct as the engine hands it over: each field set
// (not zero, not nil) under its pulumi name.
func argsProps(args any) property.Map {
	v := reflect.ValueOf(args)
	vs := map[string]property.Value{}
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("pulumi"), ",")
		if f := v.Field(i); name != "" && !f.IsZero() {
			vs[name] = propValue(f)
		}
	}
	return property.NewMap(vs)
}

// propValue is a string, number, list or map as a property value.
func propValue(v reflect.Value) property.Value {
	switch v.Kind() {
	case reflect.String:
		return property.New(v.String())
	case reflect.Int:
		return property.New(float64(v.Int()))
	case reflect.Slice:
		var arr []property.Value
		for i := range v.Len() {
			arr = append(arr, propValue(v.Index(i)))
		}
		return property.New(property.NewArray(arr))
	case reflect.Map:
		m := map[string]property.Value{}
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = propValue(it.Value())
		}
		return property.New(property.NewMap(m))
	}
	panic(fmt.Sprintf("argsProps: %v", v.Type()))
}
