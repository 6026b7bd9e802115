package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// Range is the values a numeric flag accepts, Min to Max inclusive
// (durations in nanoseconds).
type Range struct{ Min, Max float64 }

// Ints is a range of whole numbers.
func Ints(lo, hi int64) Range { return Range{float64(lo), float64(hi)} }

// Floats is a range of real numbers.
func Floats(lo, hi float64) Range { return Range{lo, hi} }

// Durations is a range of durations.
func Durations(lo, hi time.Duration) Range { return Range{float64(lo), float64(hi)} }

// Numeric says whether a flag holds a number or a duration, which must
// have a Range.
func Numeric(f *pflag.Flag) bool {
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64",
		"float32", "float64", "duration", "count":
		return true
	}
	return false
}

// check checks one flag's value.
func (r Range) check(f *pflag.Flag) error {
	if f.Value.Type() == "duration" {
		d, err := time.ParseDuration(f.Value.String())
		if err != nil {
			return Usagef("flag --%s: invalid value %q", f.Name, f.Value.String())
		}
		if float64(d) < r.Min || float64(d) > r.Max {
			return Usagef("flag --%s: %v is out of range: want %v to %v", f.Name, d, fmtDuration(r.Min), fmtDuration(r.Max))
		}
		return nil
	}
	v, err := strconv.ParseFloat(f.Value.String(), 64)
	if err != nil {
		return Usagef("flag --%s: invalid value %q", f.Name, f.Value.String())
	}
	if !(v >= r.Min && v <= r.Max) { // NaN too
		return Usagef("flag --%s: %s is out of range: want %s to %s", f.Name, f.Value.String(), fmtNumber(r.Min), fmtNumber(r.Max))
	}
	return nil
}

func fmtNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtDuration(v float64) string {
	d := time.Duration(v)
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// rangeKey is the flag annotation Ranged sets: Min and Max as text.
const rangeKey = "relayfleet/range"

// Ranged sets the range numeric flag name of fs accepts, where the flag is
// declared; CheckFlagRanges checks it before the command runs. It panics
// when fs has no such flag, a mistake in the command's code.
func Ranged(fs *pflag.FlagSet, name string, r Range) {
	if fs.Lookup(name) == nil {
		panic("cli.Ranged: no flag --" + name)
	}
	_ = fs.SetAnnotation(name, rangeKey, []string{
		strconv.FormatFloat(r.Min, 'g', -1, 64), strconv.FormatFloat(r.Max, 'g', -1, 64),
	})
}

// rangeOf is the range Ranged set on f.
func rangeOf(f *pflag.Flag) (Range, bool) {
	v, ok := f.Annotations[rangeKey]
	if !ok || len(v) != 2 {
		return Range{}, false
	}
	lo, err1 := strconv.ParseFloat(v[0], 64)
	hi, err2 := strconv.ParseFloat(v[1], 64)
	return Range{lo, hi}, err1 == nil && err2 == nil
}

// CheckFlagRanges checks every numeric flag given on the command line
// against the range Ranged set on it. A flag left at its default is not
// checked, so that a default may mean "not given".
func CheckFlagRanges(fs *pflag.FlagSet) error {
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if r, ok := rangeOf(f); ok && err == nil && Numeric(f) {
			err = r.check(f)
		}
	})
	return err
}

// UnrangedFlags are the numeric flags of fs that Ranged set no range on.
func UnrangedFlags(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := rangeOf(f); !ok && Numeric(f) {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}
