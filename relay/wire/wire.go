// Package wire holds the relay's wire types: the JSON a relay serves on
// GET /stats, a router's answer to GET /route and its GET /relays, and the
// relays file the fleet tool writes for the router. The relay and the
// router encode these types, and every reader (the fleet tool, provision,
// the load test, the demo, the bench) decodes them, so a field is named
// once. Like every package under relay/, it imports nothing else of this
// module.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Upstream is one of an edge's upstream relays in Stats.Upstreams.
type Upstream struct {
	URL       string `json:"url"`       // as given to --upstream (no token)
	Connected bool   `json:"connected"` // its link session is up
	Tracks    int    `json:"tracks"`    // tracks pulled from it now
	// Groups and Bytes count the groups and frame payload bytes pulled
	// over the link so far.
	Groups int64 `json:"groups_total"`
	Bytes  int64 `json:"bytes_total"`
}

// Stats is a snapshot of the relay, as served on /stats.
type Stats struct {
	Sessions      int   `json:"sessions"`
	SessionsTotal int64 `json:"sessions_total"`
	Publishers    int   `json:"publishers"`
	Subscribers   int64 `json:"subscribers"`
	Broadcasts    int   `json:"broadcasts"`
	Tracks        int   `json:"tracks"`
	GroupsIn      int64 `json:"groups_in"`
	FramesIn      int64 `json:"frames_in"`
	BytesIn       int64 `json:"bytes_in"`
	GroupsOut     int64 `json:"groups_out"`
	FramesOut     int64 `json:"frames_out"`
	BytesOut      int64 `json:"bytes_out"`
	// GroupsDropped counts groups subscribers lost for being too slow
	// (more than 16 groups behind).
	GroupsDropped int64 `json:"groups_dropped"`
	// Cluster links: tracks pulled from upstream relays, subscriptions
	// made upstream so far (re-subscriptions included), and whether the
	// upstream session is up.
	UpstreamTracks     int   `json:"upstream_tracks"`
	UpstreamSubscribes int64 `json:"upstream_subscribes_total"`
	UpstreamConnected  bool  `json:"upstream_connected"` // any upstream's link is up
	// Failover between upstreams (origins): each upstream with whether
	// its link is up and how many pulled tracks use it now; for each
	// pulled broadcast, the upstream URL it is pulled from now; and how
	// many times a pulled track moved to another upstream because its own
	// went silent or away.
	Upstreams         []Upstream        `json:"upstreams,omitempty"`
	UpstreamPulls     map[string]string `json:"upstream_pulls,omitempty"`
	UpstreamFailovers int64             `json:"upstream_failovers_total"`
	// Memory budget and admission control: the budget (0: none), the Go
	// runtime's memory in use, the mark above which new sessions are
	// refused, whether sessions are admitted now, the session cap (0:
	// none), how many more listeners the relay expects to take (what the
	// router compares), sessions refused and sessions reaped so far.
	MemoryBudget    int64 `json:"memory_budget"`
	MemoryUsed      int64 `json:"memory_used"`
	MemoryHighWater int64 `json:"memory_high_water"`
	Admitting       bool  `json:"admitting"`
	Draining        bool  `json:"draining"`
	MaxSessions     int   `json:"max_sessions"`
	Headroom        int   `json:"headroom"`
	Refused         int64 `json:"refused_total"`
	Reaped          int64 `json:"reaped_total"`
	// SessionsOverloaded counts sessions closed for holding more buffered
	// frame bytes than their budget.
	SessionsOverloaded int64 `json:"sessions_overloaded_total"`
	// StreamsRefused counts bidirectional streams reset as they opened,
	// under memory pressure or past the caps on streams awaiting their
	// first message; StreamsTimedOut those reset for carrying no
	// request within the first-message deadline.
	StreamsRefused  int64 `json:"streams_refused_total"`
	StreamsTimedOut int64 `json:"streams_timed_out_total"`
	// AnnouncesRefused counts announces refused for passing the
	// per-session broadcast cap or the path length cap.
	AnnouncesRefused int64 `json:"announces_refused_total"`
	// RefusedByReason splits refused_total: sessions refused at connect
	// (unauthorized, overloaded, draining, protocol) and requests refused
	// on open sessions (forbidden).
	RefusedByReason map[string]int64 `json:"refused_by_reason"`
	// UDP buffers: what was asked and what the kernel reports (SO_RCVBUF,
	// SO_SNDBUF, which Linux doubles).
	UDPBufferRequested int `json:"udp_buffer_requested"`
	UDPReceiveBuffer   int `json:"udp_receive_buffer"`
	UDPSendBuffer      int `json:"udp_send_buffer"`
	// The certificate served now: SHA-256 of its DER (what
	// /certificate.sha256 gives), its expiry, and the SHA-256 of its
	// public key (SubjectPublicKeyInfo), which stays across rotations
	// with a kept key.
	CertificateSHA256   string    `json:"certificate_sha256"`
	CertificateNotAfter time.Time `json:"certificate_not_after"`
	SPKISHA256          string    `json:"spki_sha256"`
	// TCP connections open now, and those closed at once for being past
	// Config.MaxConns so far.
	TCPConns        int   `json:"tcp_conns"`
	TCPConnsRefused int64 `json:"tcp_conns_refused_total"`

	// ShedTotal counts sessions closed with going-away (POST /shed, a
	// graceful stop).
	ShedTotal int64 `json:"shed_total"`
	// The UDP socket's own counters: datagrams the kernel dropped at it
	// (its receive buffer full; this socket's line in /proc/net/udp, not
	// the host's total) and writes that failed, by kind (eagain, enobufs,
	// other). Open sessions by transport (quic, webtransport, websocket),
	// and the net.core sysctls as this process reads them.
	UDPDrops            int64            `json:"udp_drops_total"`
	UDPSendErrors       map[string]int64 `json:"udp_send_errors"`
	SessionsByTransport map[string]int64 `json:"sessions_by_transport"`
	Sysctl              map[string]int64 `json:"sysctl,omitempty"`

	// UDP writes that succeeded (QUIC packets, a GSO train counting
	// once) and the system calls that made them: fewer with
	// Config.SendBatch, one sendmmsg carrying the packets of many
	// connections.
	UDPPacketsSent int64 `json:"udp_packets_sent_total"`
	UDPSendCalls   int64 `json:"udp_send_calls_total"`
}

// ParseStats decodes a /stats body. Fields it does not know are ignored
// (a newer relay may add some); each JSON key in require must be present,
// or the error names the first missing one.
func ParseStats(data []byte, require ...string) (Stats, error) {
	var st Stats
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	if len(require) == 0 {
		return st, nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	for _, k := range require {
		if _, ok := keys[k]; !ok {
			return st, fmt.Errorf("stats: no %s field", k)
		}
	}
	return st, nil
}

// Route is a router's answer to GET /route: the relay a listener should
// dial.
type Route struct {
	URL string `json:"url"`
	// CertificateSHA256 is the hex SHA-256 of the certificate the relay
	// served at the router's last poll (left out for an https:// relay
	// whose certificate the router does not know).
	CertificateSHA256 string `json:"certificate_sha256,omitempty"`
	// Region is the chosen relay's region (left out for a relay without
	// one). RegionFallback is true when the listener's region (its
	// region= hint, else the region whose prefixes hold its address) had
	// no relay with room and the answer is a relay of another region.
	Region         string `json:"region,omitempty"`
	RegionFallback bool   `json:"region_fallback,omitempty"`
}

// RelaysFile is the relays file the fleet tool writes and the router
// reads (see package relay/router for its rules).
type RelaysFile struct {
	Relays []Relay `json:"relays"`
	// Regions lists, per region, the address prefixes (CIDRs) of its
	// listeners: a /route without a region= hint goes to the region whose
	// prefix holds the client's address (the longest one).
	Regions []Region `json:"regions,omitempty"`
}

// Region is one region's name and listener address prefixes in the
// relays file.
type Region struct {
	Name     string   `json:"name"`
	Prefixes []string `json:"prefixes,omitempty"`
}

// Relay is one relay process in the relays file.
type Relay struct {
	// URL is what /route answers (http:// or https://), Stats the /stats
	// URL to poll.
	URL   string `json:"url"`
	Stats string `json:"stats"`
	// SPKI, optional, is the hex SHA-256 of the relay's public key (`relay
	// pin`): the router then polls it over TLS checked against that key.
	SPKI string `json:"spki_sha256,omitempty"`
	// Draining stops the router sending new listeners there.
	Draining bool `json:"draining"`
	// LastResort: the router sends new listeners there only when no
	// other relay (neither draining nor last resort) has headroom (an
	// event's burst relays after its end, while the steady fleet takes
	// their listeners as it has room).
	LastResort bool `json:"last_resort,omitempty"`
	// Region, optional, is the relay's region: the router prefers the
	// relays of a listener's region.
	Region string `json:"region,omitempty"`
}

// ParseRelaysFile decodes a relays file strictly: unknown fields and data
// after the object are errors. It checks the shape only; the router
// checks the URLs and hashes (router.Parse).
func ParseRelaysFile(data []byte) (*RelaysFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f RelaysFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("relays file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("relays file: data after the JSON object")
	}
	return &f, nil
}

// RelayState is one relay in a router's GET /relays: the file's entry and
// what the router saw at its last poll.
type RelayState struct {
	Relay
	Healthy  bool   `json:"healthy"`
	Headroom int    `json:"headroom"`
	CertHash string `json:"certificate_sha256,omitempty"`
	// Routed counts the listeners the router sent there since that poll.
	Routed int    `json:"routed_since_poll"`
	Error  string `json:"error,omitempty"`
}

// RelaysState is a router's GET /relays.
type RelaysState struct {
	Relays  []RelayState `json:"relays"`
	Regions []Region     `json:"regions,omitempty"`
}
