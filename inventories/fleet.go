package inventories

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// ProviderStatic is the provider a fleet group may name besides the
// catalogue's: static adopts servers that exist already (bought outside any
// cloud API).
const ProviderStatic = "static"

// DefaultBasePort is the first relay port on a box; process i listens on
// base_port+i.
const DefaultBasePort = 4443

// MinBasePort is the lowest base_port: ports below it are privileged.
const MinBasePort = 1024

// Fleet is a fleet file: the steady boxes that always run and the burst
// pools events draw from.
type Fleet struct {
	Version int    `yaml:"version"`
	Name    string `yaml:"name"`
	Admin   Admin  `yaml:"admin"`
	// Origin are relay URLs every relay process of the fleet pulls
	// broadcasts from that are not published to it: publishers publish
	// to the origin, listeners reach any relay. Each may end in
	// #spki=HEX, the SHA-256 of the origin's public key (`relay pin
	// --tls-key FILE`), which the edges check its certificate against; an
	// http:// origin that is not on loopback must have one (see
	// checkOrigin). The URLs go to `relay serve --upstream` as they are.
	Origin []string `yaml:"origin"`
	// Origins, when set, is the fleet's origin group: boxes the fleet
	// creates, converges and monitors like steady boxes, each running one
	// relay process with no upstream that publishers publish to. Every
	// other box (steady and burst: the edges) pulls from each of them,
	// pinned to the key the fleet made for it. It and Origin exclude each
	// other: Origin is the static pair for servers outside the stack.
	Origins *Origins `yaml:"origins"`
	// Access says who may use the relays without a token.
	Access Access  `yaml:"access"`
	Steady []Group `yaml:"steady"`
	Burst  []Pool  `yaml:"burst"`
	// Surge, when set, brings boxes up for load nobody scheduled (fleet
	// events reconcile does, beside the events).
	Surge *Surge `yaml:"surge"`
	// State says where the fleet's stacks live (state.go); zero: the
	// file backend in the operator's state dir.
	State State `yaml:"state"`
	// Regions, when set, splits the fleet into regions (regions.go), each
	// with its origin group and steady groups; it excludes the top-level
	// origin: and origins:, and once loaded Origins is the publishers'
	// region's origin group.
	Regions []Region `yaml:"regions"`
}

// OriginGroup is the group name (the boxes' group label) of the origin
// boxes; no steady group or burst pool may take it.
const OriginGroup = "origin"

// MinOrigins is the fewest origin boxes an origin group may have: one
// origin's loss must leave the edges another.
const MinOrigins = 2

// Origins is the fleet's origin group.
type Origins struct {
	Provider string `yaml:"provider"`
	// Shape names a catalogue shape of Provider.
	Shape    string `yaml:"shape"`
	Location string `yaml:"location"`
	Image    string `yaml:"image"`
	// BasePort is the origin relay's port; default DefaultBasePort.
	BasePort int `yaml:"base_port"`
	// Count is the number of origin boxes, at least MinOrigins.
	Count int `yaml:"count"`
}

// Box is the origin boxes' layout: one relay process each (a publisher
// publishes to one URL per box).
func (o *Origins) Box() Box {
	return Box{Provider: o.Provider, Shape: o.Shape, Location: o.Location, Image: o.Image, Processes: 1, BasePort: o.BasePort}
}

func (o *Origins) validate(cat *Catalogue, p string) error {
	if o.Provider == ProviderStatic {
		return fieldErr(p+".provider", "static servers are named in origin: as URLs with their pins; origins: makes boxes")
	}
	b := o.Box()
	if err := b.validate(cat, p); err != nil {
		return err
	}
	o.BasePort = b.BasePort
	if o.Count < MinOrigins {
		return fieldErr(p+".count", "want at least %d origin boxes (one origin's loss must leave the edges another), got %d", MinOrigins, o.Count)
	}
	if o.Count > MaxBoxes {
		return fieldErr(p+".count", "want at most %d boxes, got %d", MaxBoxes, o.Count)
	}
	return nil
}

// MaxSessionsPerAddress is the largest access.max_sessions_per_address.
const MaxSessionsPerAddress = 1 << 16

// Access is the fleet's token policy. Every relay verifies tokens signed
// with the fleet's key (fleet token mints them); publishing always needs
// one.
type Access struct {
	// PublicListen are broadcast path prefixes (such as live/) anyone may
	// listen under without a token; everything else needs one.
	PublicListen []string `yaml:"public_listen"`
	// MaxSessionsPerAddress caps the sessions each relay process admits
	// from one source address (relay serve --max-sessions-per-address);
	// unset, DefaultMaxSessionsPerAddress; 0 sets no cap (a fleet whose
	// listeners come through one proxy or carrier NAT).
	MaxSessionsPerAddress *int `yaml:"max_sessions_per_address,omitempty"`
	// LoadGenerators are the addresses (or CIDR prefixes) of the fleet's
	// own load generators (fleet loadtest, the demo's loadgen), whose
	// sessions no per-address cap counts (relay serve
	// --uncapped-addresses): they open thousands from one address.
	LoadGenerators []string `yaml:"load_generators,omitempty"`
}

// DefaultMaxSessionsPerAddress is access.max_sessions_per_address when the
// fleet file does not set it: relay serve's own default
// (relay.DefaultMaxSessionsPerAddress).
const DefaultMaxSessionsPerAddress = 64

// MaxLoadGenerators is the most access.load_generators entries.
const MaxLoadGenerators = 64

// SessionsPerAddress is the per-address session cap the fleet's relays
// run with: access.max_sessions_per_address, or the default; 0 is none.
func (a Access) SessionsPerAddress() int {
	if a.MaxSessionsPerAddress == nil {
		return DefaultMaxSessionsPerAddress
	}
	return *a.MaxSessionsPerAddress
}

// UncappedAddresses is access.load_generators as relay serve
// --uncapped-addresses takes it: CIDR prefixes, comma-separated, "" for
// none. The fleet file is valid (Validate).
func (a Access) UncappedAddresses() string {
	var out []string
	for _, s := range a.LoadGenerators {
		if p, err := parseAddressOrPrefix(s); err == nil {
			out = append(out, p.String())
		}
	}
	return strings.Join(out, ",")
}

// Uncapped reports whether addr is one of access.load_generators.
func (a Access) Uncapped(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, s := range a.LoadGenerators {
		if p, err := parseAddressOrPrefix(s); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseAddressOrPrefix reads an IP address (its own /32 or /128) or a
// CIDR prefix.
func parseAddressOrPrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	return p.Masked(), nil
}

// Admin is who may reach the boxes' SSH.
type Admin struct {
	// Ranges are the CIDRs allowed to reach SSH through cloud firewalls.
	Ranges []string `yaml:"ranges"`
	// SSHKeys are authorized public keys for the admin user.
	SSHKeys []string `yaml:"ssh_keys"`
}

// Box is the relay layout shared by steady groups and burst pools.
type Box struct {
	Provider string `yaml:"provider"`
	// Shape names a catalogue shape of Provider; for static groups it is
	// PROVIDER/SHAPE (what the servers were bought as).
	Shape     string    `yaml:"shape"`
	Location  string    `yaml:"location"`
	Image     string    `yaml:"image"`
	Processes Processes `yaml:"processes"`
	BasePort  int       `yaml:"base_port"`
}

// Group is a set of steady boxes of one shape.
type Group struct {
	Name string `yaml:"name"`
	Box  `yaml:",inline"`
	// Count is the number of boxes; for static groups it defaults to the
	// number of hosts.
	Count int `yaml:"count"`
	// Hosts lists existing servers for provider static.
	Hosts []StaticHost `yaml:"hosts"`
}

// Pool is a burst pool: boxes of one shape that events create and destroy.
type Pool struct {
	Name string `yaml:"name"`
	Box  `yaml:",inline"`
	// Max caps how many boxes the pool may hold at once; 0 means no cap.
	Max int `yaml:"max"`
	// Candidates, for an event's burst only, are where its boxes may come
	// from, in order of preference: the first carries the plan; boxes a
	// candidate cannot make (a capacity or quota refusal, an action that
	// never finishes, a server without an address) are planned again on
	// the next. The pool's own provider, shape and location are the
	// first's.
	Candidates []Candidate `yaml:"candidates"`
}

// Candidate is one place an event's burst boxes may come from.
type Candidate struct {
	Provider string `yaml:"provider"`
	Shape    string `yaml:"shape"`
	Location string `yaml:"location"`
	Image    string `yaml:"image"`
	// Max caps the boxes this candidate may hold (a quota); 0: no cap.
	Max int `yaml:"max"`
}

// Ref is the candidate as PROVIDER/SHAPE@LOCATION (PROVIDER/SHAPE with no
// location).
func (c Candidate) Ref() string {
	if c.Location == "" {
		return c.Provider + "/" + c.Shape
	}
	return c.Provider + "/" + c.Shape + "@" + c.Location
}

// MaxCandidates is the most candidates an event may list.
const MaxCandidates = 8

// Choices is the pool's candidates: those it lists, or its own provider,
// shape and location as the only one.
func (p *Pool) Choices() []Candidate {
	if len(p.Candidates) > 0 {
		return p.Candidates
	}
	return []Candidate{{Provider: p.Provider, Shape: p.Shape, Location: p.Location, Image: p.Image}}
}

// CandidateBox is the box candidate i of the pool makes: its provider,
// shape, location and image, with the pool's processes and base port.
func (p *Pool) CandidateBox(i int) Box {
	c := p.Choices()[i]
	b := p.Box
	b.Provider, b.Shape, b.Location, b.Image = c.Provider, c.Shape, c.Location, c.Image
	return b
}

// StaticHost is an existing server given by address.
type StaticHost struct {
	Address string `yaml:"address"`
	User    string `yaml:"user"`
	// HostKey is the server's public host key, "TYPE BASE64" as in
	// known_hosts; every connection checks it.
	HostKey string `yaml:"host_key"`
}

// ShapeRef resolves the group's shape to a catalogue reference.
func (b *Box) ShapeRef(cat *Catalogue) (*Provider, *Shape, error) {
	if b.Provider == ProviderStatic {
		return cat.Lookup(b.Shape)
	}
	p, ok := cat.Provider(b.Provider)
	if !ok {
		return nil, nil, fmt.Errorf("unknown provider %q (known: static, %s)", b.Provider, strings.Join(cat.providerNames(), ", "))
	}
	region := ""
	if b.Location != "" && len(p.Regions) > 0 {
		r, ok := p.RegionOf(b.Location)
		if !ok {
			return nil, nil, fmt.Errorf("provider %s has no location %q", p.Name, b.Location)
		}
		region = r
	}
	s, ok := p.Shape(b.Shape, region)
	if !ok {
		return nil, nil, fmt.Errorf("provider %s has no shape %q%s (known: %s)", p.Name, b.Shape, inRegion(region), strings.Join(p.shapeNames(), ", "))
	}
	return p, s, nil
}

// BoxCount is the number of boxes in the group.
func (g *Group) BoxCount() int {
	if g.Provider == ProviderStatic && g.Count == 0 {
		return len(g.Hosts)
	}
	return g.Count
}

// validate checks the fleet against the catalogue.
func (f *Fleet) validate(cat *Catalogue) error {
	for i, r := range f.Admin.Ranges {
		if _, err := netip.ParsePrefix(r); err != nil {
			return fieldErr(fmt.Sprintf("admin.ranges[%d]", i), "want a CIDR such as 203.0.113.0/24, got %q", r)
		}
		if pfx, _ := netip.ParsePrefix(r); pfx.Bits() == 0 {
			return fieldErr(fmt.Sprintf("admin.ranges[%d]", i), "%s opens SSH to the whole internet; name your admin ranges", r)
		}
	}
	for i, k := range f.Admin.SSHKeys {
		if err := checkPublicKey(k); err != nil {
			return fieldErr(fmt.Sprintf("admin.ssh_keys[%d]", i), "%v", err)
		}
	}
	for i, o := range f.Origin {
		if err := checkOrigin(o); err != nil {
			return fieldErr(fmt.Sprintf("origin[%d]", i), "%v", err)
		}
	}
	if len(f.Regions) > 0 {
		switch {
		case f.Origins != nil && f.Origins != f.RootRegion().Origins: // (validated once already: the root's)
			return fieldErr("origins", "with regions:, each region names its origins (regions[].origins); leave the top-level origins: out")
		case len(f.Origin) > 0:
			return fieldErr("origin", "with regions:, each region names its origins (regions[].origins); static origin URLs do not combine with regions")
		}
	}
	if f.Origins != nil && len(f.Regions) == 0 {
		if len(f.Origin) > 0 {
			return fieldErr("origins", "the fleet names origin: (static origin URLs) too; keep one of origin: and origins:")
		}
		if err := f.Origins.validate(cat, "origins"); err != nil {
			return err
		}
	}
	if n := f.Access.SessionsPerAddress(); n < 0 || n > MaxSessionsPerAddress {
		return fieldErr("access.max_sessions_per_address", "%d; want 0 (no cap) to %d", n, MaxSessionsPerAddress)
	}
	if len(f.Access.LoadGenerators) > MaxLoadGenerators {
		return fieldErr("access.load_generators", "%d entries; want at most %d", len(f.Access.LoadGenerators), MaxLoadGenerators)
	}
	for i, s := range f.Access.LoadGenerators {
		if _, err := parseAddressOrPrefix(s); err != nil {
			return fieldErr(fmt.Sprintf("access.load_generators[%d]", i), "%v", err)
		}
	}
	for i, p := range f.Access.PublicListen {
		if err := checkPathPrefix(p); err != nil {
			return fieldErr(fmt.Sprintf("access.public_listen[%d]", i), "%v", err)
		}
	}
	names := map[string]string{OriginGroup: "the origin group"}
	for _, rg := range f.Regions {
		if rg.Name != "" {
			names[RegionOriginGroup(rg.Name)] = "region " + rg.Name + "'s origin group"
		}
	}
	seenName := func(path, name string) error {
		if name == "" {
			return fieldErr(path+".name", "missing")
		}
		if prev, ok := names[name]; ok {
			return fieldErr(path+".name", "%q is already the name of %s", name, prev)
		}
		names[name] = path
		return nil
	}
	for i := range f.Steady {
		g := &f.Steady[i]
		p := fmt.Sprintf("steady[%d]", i)
		if err := seenName(p, g.Name); err != nil {
			return err
		}
		if err := g.Box.validate(cat, p); err != nil {
			return err
		}
		if g.Count < 0 {
			return fieldErr(p+".count", "must not be negative, got %d", g.Count)
		}
		if g.Count > MaxBoxes {
			return fieldErr(p+".count", "want at most %d boxes, got %d", MaxBoxes, g.Count)
		}
		if g.Provider == ProviderStatic {
			if len(g.Hosts) == 0 {
				return fieldErr(p+".hosts", "a static group lists its servers by address, user and host_key")
			}
			if g.Count != 0 && g.Count != len(g.Hosts) {
				return fieldErr(p+".count", "is %d but %d hosts are listed; leave count out for static groups", g.Count, len(g.Hosts))
			}
			for j := range g.Hosts {
				if err := g.Hosts[j].validate(fmt.Sprintf("%s.hosts[%d]", p, j)); err != nil {
					return err
				}
			}
		} else if len(g.Hosts) > 0 {
			return fieldErr(p+".hosts", "only static groups list hosts; provider %s creates its boxes", g.Provider)
		}
	}
	for i := range f.Burst {
		b := &f.Burst[i]
		p := fmt.Sprintf("burst[%d]", i)
		if err := seenName(p, b.Name); err != nil {
			return err
		}
		if b.Provider == ProviderStatic {
			return fieldErr(p+".provider", "a burst pool creates boxes on demand; static servers belong in steady")
		}
		if err := b.Box.validate(cat, p); err != nil {
			return err
		}
		if b.Max < 0 {
			return fieldErr(p+".max", "must not be negative, got %d", b.Max)
		}
		if b.Max > MaxBoxes {
			return fieldErr(p+".max", "want at most %d boxes, got %d", MaxBoxes, b.Max)
		}
		if len(b.Candidates) > 0 {
			return fieldErr(p+".candidates", "only an event's burst lists candidates (in the events file)")
		}
	}
	if f.Surge != nil {
		if err := f.Surge.validate(cat); err != nil {
			return err
		}
	}
	if err := f.validateRegions(cat); err != nil {
		return err
	}
	return f.State.validate()
}

func (b *Box) validate(cat *Catalogue, p string) error {
	if b.Provider == "" {
		return fieldErr(p+".provider", "missing; want hcloud, digitalocean, lab or static")
	}
	if b.Shape == "" {
		return fieldErr(p+".shape", "missing")
	}
	prov, _, err := b.ShapeRef(cat)
	if err != nil {
		field := ".shape"
		if strings.Contains(err.Error(), "unknown provider") && b.Provider != ProviderStatic {
			field = ".provider"
		} else if strings.Contains(err.Error(), "no location") {
			field = ".location"
		}
		return fieldErr(p+field, "%v", err)
	}
	if prov.Unusable != "" {
		return fieldErr(p+".provider", "%s cannot carry relay audio: %s", prov.Name, prov.Unusable)
	}
	if b.BasePort == 0 {
		b.BasePort = DefaultBasePort
	}
	if b.BasePort < 1 || b.BasePort > 65535 {
		return fieldErr(p+".base_port", "want a port between 1 and 65535, got %d", b.BasePort)
	}
	if b.BasePort < MinBasePort {
		// The hardened relay unit has no CAP_NET_BIND_SERVICE: a relay
		// process cannot bind a privileged port, and would fail to start.
		return fieldErr(p+".base_port", "want %d or above (the relay runs without the capability to bind a privileged port), got %d", MinBasePort, b.BasePort)
	}
	return nil
}

func (h *StaticHost) validate(p string) error {
	if h.Address == "" {
		return fieldErr(p+".address", "missing")
	}
	host := h.Address
	if hh, _, err := net.SplitHostPort(h.Address); err == nil {
		host = hh
	}
	if _, err := netip.ParseAddr(host); err != nil && !validHostname(host) {
		return fieldErr(p+".address", "want an IP address or host name, got %q", h.Address)
	}
	if h.User == "" {
		h.User = "root"
	}
	if h.HostKey == "" {
		return fieldErr(p+".host_key", "missing; relayfleet checks every host key (get it with ssh-keyscan, and compare its fingerprint out of band)")
	}
	if err := checkPublicKey(h.HostKey); err != nil {
		return fieldErr(p+".host_key", "%v", err)
	}
	return nil
}

// checkPublicKey accepts "TYPE BASE64 [comment]" as in known_hosts and
// authorized_keys. The full parse happens where SSH is used.
func checkPublicKey(k string) error {
	f := strings.Fields(k)
	if len(f) < 2 {
		return fmt.Errorf("want \"TYPE BASE64\" such as \"ssh-ed25519 AAAA...\", got %q", k)
	}
	switch {
	case strings.HasPrefix(f[0], "ssh-"), strings.HasPrefix(f[0], "ecdsa-sha2-"), strings.HasPrefix(f[0], "sk-"):
	default:
		return fmt.Errorf("unknown key type %q", f[0])
	}
	if _, err := base64.StdEncoding.DecodeString(f[1]); err != nil {
		return fmt.Errorf("key data is not base64")
	}
	return nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

// checkOrigin validates one origin URL and how the edges will trust its
// certificate: by the pin in #spki=HEX, by a CA for https://, or, for an
// http:// origin on loopback only, by the hash it serves over HTTP.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(o, " ,%'\"") {
		return fmt.Errorf("want a relay URL such as https://origin.example:4443/ or http://10.0.0.1:4443/#spki=HEX, got %q", o)
	}
	if u.Port() == "" {
		return fmt.Errorf("%q: want a port, such as :4443", o)
	}
	pinned := false
	if u.Fragment != "" || strings.Contains(o, "#") {
		pin, ok := strings.CutPrefix(u.Fragment, "spki=")
		if d, err := hex.DecodeString(pin); !ok || err != nil || len(d) != sha256.Size {
			return fmt.Errorf("%q: the part after # must be spki= and 64 hex digits (the SHA-256 of the origin's public key, from relay pin --tls-key FILE)", o)
		}
		pinned = true
	}
	if u.Scheme == "http" && !pinned && !isLoopback(u.Hostname()) {
		return fmt.Errorf("%q: an http:// origin that is not on loopback needs its key pinned: append #spki=HEX (relay pin --tls-key FILE on the origin), or use https:// with a CA-signed certificate; otherwise every edge would trust a certificate hash fetched in clear text", o)
	}
	return nil
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// checkPathPrefix checks a broadcast path prefix: non-empty, at most 128
// bytes of letters, digits and - _ . /, relative, with no empty, "." or
// ".." segment (the relay's command line carries it).
func checkPathPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("empty; want a broadcast path prefix such as live/")
	}
	if len(p) > 128 {
		return fmt.Errorf("%d bytes long; want at most 128", len(p))
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/') {
			return fmt.Errorf("%q has the character %q; want letters, digits, '-', '_', '.' and '/'", p, r)
		}
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q starts with '/'; broadcast paths are relative, as in live/", p)
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%q has the segment %q; want no empty, '.' or '..' segment", p, seg)
		}
	}
	return nil
}
