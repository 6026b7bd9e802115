package program

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// argsInput turns one of the provider's args structs (provider.BoxArgs,
// HostArgs, FirewallArgs: each resource's schema) into the inputs the
// program registers: each field under its pulumi name. from gives the
// fields whose values are not plain, another resource's outputs or a
// secret, by the field's address in *args; each must have the field's
// type. An optional string or number left at zero is not sent: the
// provider reads a missing one as zero (and its Check returns it as zero,
// so the state holds the same). Every other field is sent, lists and maps
// empty or not, which the provider keeps as they come.
func argsInput(args any, from map[any]pulumi.Input) (pulumi.Map, error) {
	v := reflect.ValueOf(args)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("args %T: want a pointer to a struct", args)
	}
	return structInput(v.Elem(), from)
}

// structInput is argsInput of the struct v, addressable where from is
// not empty.
func structInput(v reflect.Value, from map[any]pulumi.Input) (pulumi.Map, error) {
	t := v.Type()
	used := 0
	in := pulumi.Map{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, flags, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fv := v.Field(i)
		if o, ok := from[fieldAddr(fv, from)]; ok {
			if o.ElementType() != f.Type {
				return nil, fmt.Errorf("%s.%s: an input of %v, want %v", t.Name(), f.Name, o.ElementType(), f.Type)
			}
			in[name] = o
			used++
			continue
		}
		if strings.Contains(","+flags+",", ",optional,") && isZeroScalar(fv) {
			continue
		}
		x, err := plainInput(fv)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.Name(), f.Name, err)
		}
		in[name] = x
	}
	if used != len(from) {
		return nil, fmt.Errorf("%s: %d of the outputs given are not its fields", t.Name(), len(from)-used)
	}
	return in, nil
}

// plainInput is a plain value (string, number, list, map, struct with
// pulumi tags) as an input.
func plainInput(v reflect.Value) (pulumi.Input, error) {
	switch v.Kind() {
	case reflect.String:
		return pulumi.String(v.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return pulumi.Int(int(v.Int())), nil
	case reflect.Float32, reflect.Float64:
		return pulumi.Float64(v.Float()), nil
	case reflect.Bool:
		return pulumi.Bool(v.Bool()), nil
	case reflect.Slice:
		arr := make(pulumi.Array, 0, v.Len())
		for i := range v.Len() {
			x, err := plainInput(v.Index(i))
			if err != nil {
				return nil, err
			}
			arr = append(arr, x)
		}
		return arr, nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map keyed by %v", v.Type().Key())
		}
		m := pulumi.Map{}
		for it := v.MapRange(); it.Next(); {
			x, err := plainInput(it.Value())
			if err != nil {
				return nil, err
			}
			m[it.Key().String()] = x
		}
		return m, nil
	case reflect.Struct:
		return structInput(v, nil)
	}
	return nil, fmt.Errorf("cannot send a %v", v.Type())
}

// fieldAddr is the address of field f, the key of from, or nil where from
// is empty (f need not be addressable then).
func fieldAddr(f reflect.Value, from map[any]pulumi.Input) any {
	if len(from) == 0 {
		return nil
	}
	return f.Addr().Interface()
}

// isZeroScalar reports whether v is a string, number or bool at its zero
// value.
func isZeroScalar(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Float32, reflect.Float64:
		return v.IsZero()
	}
	return false
}
