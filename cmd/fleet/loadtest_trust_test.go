package main

import (
	"strings"
	"testing"
)

// TestLoadtestReadsCertificateHashOverSSH: the sampler, which runs on the
// box over SSH, reads each process's certificate hash from its /stats, so
// the load generator pins it rather than fetching it over plain HTTP.
func TestLoadtestReadsCertificateHashOverSSH(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	s, err := parseSample("1795995295732665628\n== 4443\nstats {\"subscribers\": 3, \"certificate_sha256\": \"" + hash + "\"}\n== 4444\nstats \n")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Procs[4443].CertHash; got != hash {
		t.Errorf("4443: certificate hash %q, want %q", got, hash)
	}
	if got := s.Procs[4444].CertHash; got != "" {
		t.Errorf("4444 (no stats): certificate hash %q", got)
	}
}
