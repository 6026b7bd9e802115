package capacity

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/relayfleet/relayfleet/inventories"
)

// ParseBox reads a box given by its size (fleet plan --box):
// cores=12,ram=64GiB[,processes=N|auto][,uplink=1Gbit]. The uplink is
// 1 Gbit/s unless given; processes one per core unless given.
func ParseBox(s string) (Box, error) {
	box := Box{Uplink: 1_000_000_000}
	procs := inventories.Processes(0)
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return Box{}, fmt.Errorf("want KEY=VALUE pairs such as cores=12,ram=64GiB,processes=2,uplink=1Gbit, got %q", kv)
		}
		if seen[k] {
			return Box{}, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "cores":
			box.Cores, err = strconv.Atoi(v)
			if err != nil || box.Cores <= 0 || box.Cores > inventories.MaxCores {
				return Box{}, fmt.Errorf("cores: want an integer from 1 to %d, got %q", inventories.MaxCores, v)
			}
		case "ram":
			box.RAM, err = inventories.ParseBytes(v)
			if err != nil || box.RAM <= 0 || box.RAM > inventories.MaxRAM {
				return Box{}, fmt.Errorf("ram: want a size such as 64GiB, at most %s, got %q", inventories.MaxRAM.IEC(), v)
			}
		case "processes":
			procs, err = inventories.ParseProcesses(v)
			if err != nil {
				return Box{}, err
			}
		case "uplink":
			box.Uplink, err = inventories.ParseBitRate(v)
			if err != nil || box.Uplink <= 0 || box.Uplink > inventories.MaxUplink {
				return Box{}, fmt.Errorf("uplink: want a rate such as 1Gbit, at most %s, got %q", inventories.MaxUplink, v)
			}
		default:
			return Box{}, fmt.Errorf("unknown key %q (want cores, ram, processes, uplink)", k)
		}
	}
	if !seen["cores"] || !seen["ram"] {
		return Box{}, fmt.Errorf("cores and ram are required, as in cores=12,ram=64GiB")
	}
	box.Processes = procs.For(box.Cores)
	return box, nil
}

// Choice is what a plan may use: a fleet's steady boxes (they carry load
// first), then a custom box, or one catalogue shape, or else the fleet's
// burst pools, or else every usable shape of the catalogue.
type Choice struct {
	Fleet *inventories.Fleet // nil: none
	Box   *Box               // a box given by its size (Custom)
	Shape string             // PROVIDER/SHAPE[@REGION]
}

// ShapeError is a Choice's Shape that the catalogue cannot plan with.
type ShapeError struct{ Err error }

func (e *ShapeError) Error() string { return e.Err.Error() }
func (e *ShapeError) Unwrap() error { return e.Err }

// Candidates are the candidates of the boxes ch allows, steady ones first.
// A Shape the catalogue lacks, or whose provider cannot carry relay
// audio, is a *ShapeError.
func Candidates(cat *inventories.Catalogue, ch Choice) ([]Candidate, error) {
	var cands []Candidate
	if ch.Fleet != nil {
		for _, g := range ch.Fleet.Steady {
			c, err := BoxCandidate(cat, Steady, g.Name, &g.Box)
			if err != nil {
				return nil, err
			}
			c.Count = g.BoxCount()
			cands = append(cands, c)
		}
	}
	switch {
	case ch.Box != nil:
		cands = append(cands, Candidate{Role: Custom, Name: "custom", Box: *ch.Box})
	case ch.Shape != "":
		p, s, err := cat.Lookup(ch.Shape)
		if err != nil {
			return nil, &ShapeError{err}
		}
		if p.Unusable != "" {
			return nil, &ShapeError{fmt.Errorf("%s cannot carry relay audio: %s", p.Name, p.Unusable)}
		}
		cands = append(cands, ShapeCandidate(p, s, s.Ref(p), 0, Burst))
	case ch.Fleet != nil:
		for _, pool := range ch.Fleet.Burst {
			c, err := BoxCandidate(cat, Burst, pool.Name, &pool.Box)
			if err != nil {
				return nil, err
			}
			c.Max = pool.Max
			cands = append(cands, c)
		}
	default:
		for i := range cat.Providers {
			p := &cat.Providers[i]
			if p.Unusable != "" || p.Kind == inventories.KindLab || p.Kind == inventories.KindCDN {
				continue
			}
			for j := range p.Shapes {
				s := &p.Shapes[j]
				cands = append(cands, ShapeCandidate(p, s, s.Ref(p), 0, Burst))
			}
		}
	}
	return cands, nil
}
