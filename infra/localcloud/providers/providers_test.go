package providers

import (
	"context"
	"io"
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	if got, want := Names(), []string{"digitalocean", "hcloud"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for name, api := range APIs {
		if api.Mount == "" || api.Env == "" || api.URL == "" || api.Token == "" || api.New == nil {
			t.Errorf("%s: incomplete: %+v", name, api)
		}
	}
}

func TestServeUnknownProvider(t *testing.T) {
	if err := Serve(context.Background(), "aws", Options{Out: io.Discard, Log: io.Discard}); err == nil {
		t.Error("Serve(aws): no error")
	}
}
