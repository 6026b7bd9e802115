package pricing

import (
	"bytes"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

func TestIncludedEgress(t *testing.T) {
	for _, tc := range []struct {
		e    inventories.Egress
		want string
	}{
		{inventories.Egress{Accrues: inventories.AccrueUnmetered}, "unmetered"},
		{inventories.Egress{Included: 20 << 40}, inventories.Bytes(20 << 40).IEC()},
		{inventories.Egress{Included: 500 << 30}, "500 GiB"},
		{inventories.Egress{Included: 1e12 + 1}, inventories.Bytes(1e12 + 1).String()},
	} {
		if got := includedEgress(tc.e); got != tc.want {
			t.Errorf("includedEgress(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestWriteDifferencesSame(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDifferences(&b, &inventories.Catalogue{}, "p.yaml", nil, []string{"hcloud", "digitalocean"}); err != nil {
		t.Fatal(err)
	}
	if want := "\nlive prices (0 rows from hcloud digitalocean): the same as p.yaml\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
