package provision

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/sysctl"
)

// outputRunner answers every command with the same output.
type outputRunner []byte

func (o outputRunner) Run(context.Context, string, io.Reader) ([]byte, error) { return o, nil }

// FuzzReadSysctl parses arbitrary read-back output from a box: values come
// back whitespace-normalised and never empty, keys without a tab or a
// newline. When the output is what the read-back script prints (KEY, a
// tab, the value with tabs and newlines made spaces), every key with a
// value reads back as that value.
func FuzzReadSysctl(f *testing.F) {
	f.Add([]byte("net.core.rmem_max\t16777216\nnet.core.wmem_max\t\n"), "16777216", "4096\t87380\n6291456 ")
	f.Add([]byte("\t\t\n\n\tx\n"), "", " ")
	f.Add([]byte("k"), "a\nb", "\t")
	f.Fuzz(func(t *testing.T, raw []byte, v1, v2 string) {
		prof := sysctl.Relay()
		got, err := ReadSysctl(context.Background(), outputRunner(raw), prof)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range got {
			if strings.ContainsAny(k, "\t\n") || v == "" || v != strings.Join(strings.Fields(v), " ") {
				t.Fatalf("read back %q = %q from %q", k, v, raw)
			}
		}
		var out strings.Builder
		want := map[string]string{}
		for i, s := range prof.Settings {
			v := v1
			if i%2 == 1 {
				v = v2
			}
			fmt.Fprintf(&out, "%s\t%s\n", s.Key, strings.NewReplacer("\t", " ", "\n", " ").Replace(v))
			if n := strings.Join(strings.Fields(v), " "); n != "" {
				want[s.Key] = n
			}
		}
		got, err = ReadSysctl(context.Background(), outputRunner(out.String()), prof)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("script output %q read back as %q, want %q", out.String(), got, want)
		}
	})
}
