package loadtest

import (
	"slices"
	"strings"
	"testing"
)

func TestMatchTarget(t *testing.T) {
	names := []string{"lab-1", "lab-2", "203.0.113.5", "203.0.113.6:2222", "2001:db8::1"}
	for _, tc := range []struct {
		in   string
		idx  int
		want Target
		err  string
	}{
		{in: "lab-1", idx: 0, want: Target{Box: "lab-1"}},
		{in: "lab-2:4444", idx: 1, want: Target{Box: "lab-2", Port: 4444}},
		{in: "203.0.113.5", idx: 2, want: Target{Box: "203.0.113.5"}},
		{in: "203.0.113.5:4443", idx: 2, want: Target{Box: "203.0.113.5", Port: 4443}},
		// A static address with its SSH port is a box; a relay port after it, a process.
		{in: "203.0.113.6:2222", idx: 3, want: Target{Box: "203.0.113.6:2222"}},
		{in: "203.0.113.6:2222:4445", idx: 3, want: Target{Box: "203.0.113.6:2222", Port: 4445}},
		{in: "2001:db8::1", idx: 4, want: Target{Box: "2001:db8::1"}},
		{in: "2001:db8::1:4443", idx: 4, want: Target{Box: "2001:db8::1", Port: 4443}},
		{in: "lab-1:http", err: `"lab-1:http": want BOX or BOX:PORT with a port from 1 to 65535`},
		{in: "lab-1:0", err: "with a port from 1 to 65535"},
		{in: "lab-1:70000", err: "with a port from 1 to 65535"},
		{in: "lab-3", err: `no box "lab-3" among the steady stack's hosts (fleet hosts lists them; boxes: lab-1, lab-2, 203.0.113.5, 203.0.113.6:2222, 2001:db8::1)`},
		{in: "lab-3:4443", err: `no box "lab-3:4443"`},
		{in: ":4443", err: `no box ":4443"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			idx, got, err := MatchTarget(names, tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || idx != tc.idx || got != tc.want {
				t.Errorf("got %d %+v %v, want %d %+v", idx, got, err, tc.idx, tc.want)
			}
		})
	}
}

func TestParseSteps(t *testing.T) {
	got, err := ParseSteps("400, 100,200")
	if err != nil || !slices.Equal(got, []int{100, 200, 400}) {
		t.Errorf("got %v %v", got, err)
	}
	for in, want := range map[string]string{
		"100,200":                "want at least 3 listener counts to fit a curve, got 2",
		"100,x,200":              `"x" is not a positive listener count`,
		"0,100,200":              `"0" is not a positive listener count`,
		"100,100,200":            "100 is given twice",
		"100,,200,300":           `"" is not a positive listener count`,
		"-5,100,200,30":          `"-5" is not a positive listener count`,
		"100,200,99999999999999": "99999999999999 is out of range: want listener counts from 1 to 1000000",
	} {
		if _, err := ParseSteps(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

func TestDefaultSteps(t *testing.T) {
	for cpus, want := range map[int]string{1: "100,200,400,600", 2: "100,200,400,600", 8: "400,800,1600,2400"} {
		got := DefaultSteps(cpus)
		if got != want {
			t.Errorf("DefaultSteps(%d) = %q, want %q", cpus, got, want)
		}
		if _, err := ParseSteps(got); err != nil {
			t.Errorf("DefaultSteps(%d): %v", cpus, err)
		}
	}
}
