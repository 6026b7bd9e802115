package relay

import (
	"context"
	"encoding/binary"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// The fleet heartbeat. Broadcast paths under ReservedPrefix belong to the
// relays themselves: no session may announce (publish) anything there,
// whatever its token grants. A relay without upstreams (an origin)
// publishes HeartbeatPath itself, track HeartbeatTrack: one group every
// Config.HeartbeatInterval, each one frame of HeartbeatFrameLen bytes, the
// group's sequence then the send time in Unix nanoseconds, both 8-byte
// big-endian. A relay with upstreams (an edge) pulls HeartbeatPath from
// its upstream like any broadcast nobody publishes locally, so hearing
// the heartbeat through an edge process shows that the process forwards
// what its origin sends.
//
// Subscribing to HeartbeatPath needs no token: it carries no secret. A
// session with a token may subscribe to it whatever the token grants; a
// session without one is admitted, with an auth key and no public listen
// prefixes, only when its root (the URL path) is under ReservedPrefix,
// so a probe connects to /.fleet and subscribes to "heartbeat"; sessions
// elsewhere without a token are refused at connect, as before.
//
// The heartbeat is not announced: listeners that take the first
// broadcast announced never land on it.
const (
	// ReservedPrefix is the broadcast path prefix that only the relays
	// themselves publish under (paths are relative to the relay's root,
	// without a leading slash).
	ReservedPrefix = ".fleet/"
	// HeartbeatPath is the broadcast the fleet heartbeat is published as.
	HeartbeatPath = ReservedPrefix + "heartbeat"
	// HeartbeatTrack is the heartbeat broadcast's one track.
	HeartbeatTrack = "heartbeat"
	// HeartbeatFrameLen is the size of a heartbeat group's one frame.
	HeartbeatFrameLen = 16
	// DefaultHeartbeatInterval is Config.HeartbeatInterval's default: the
	// audio's frame interval.
	DefaultHeartbeatInterval = 120 * time.Millisecond
	// MinHeartbeatInterval is the shortest Config.HeartbeatInterval.
	MinHeartbeatInterval = time.Millisecond
)

// reservedRoot is ReservedPrefix as a cleaned path.
var reservedRoot = strings.TrimSuffix(ReservedPrefix, "/")

// Reserved reports whether the broadcast path p (cleaned, relative to the
// relay's root) is under ReservedPrefix, where no client may publish.
func Reserved(p string) bool { return bpath.HasPrefix(reservedRoot, bpath.Clean(p)) }

// AppendHeartbeat appends a heartbeat frame: seq and the send time, each
// 8 bytes big-endian.
func AppendHeartbeat(b []byte, seq uint64, sent time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint64(b, uint64(sent.UnixNano()))
}

// heartbeatStart is the first sequence number of a heartbeat that starts
// at now, and when to send it: one past the number of intervals since the
// Unix epoch, at the end of the interval now is in. A group with sequence
// s is never sent before s intervals since the epoch, so the sequence
// keeps increasing across restarts (as long as the clock does), and a
// restart shows as the beats missed meanwhile.
func heartbeatStart(now time.Time, interval time.Duration) (uint64, time.Time) {
	seq := uint64(now.UnixNano()/int64(interval)) + 1
	return seq, time.Unix(0, int64(seq)*int64(interval))
}

// newHeartbeat makes the heartbeat's track, living until the server's
// heartbeat ends (RunHeartbeat); s.heartbeat holds it.
func newHeartbeat() *track {
	b := &broadcast{path: HeartbeatPath, suffix: HeartbeatPath, tracks: make(map[string]*track)}
	ctx, cancel := context.WithCancel(context.Background())
	t := &track{b: b, name: HeartbeatTrack, ctx: ctx, cancel: cancel, local: true, subs: make(map[*subscriber]struct{})}
	b.tracks[HeartbeatTrack] = t
	return t
}

// RunHeartbeat publishes HeartbeatPath, one group every interval, until
// ctx ends; then the heartbeat's subscribers see the track end. It returns
// at once on a relay that does not publish one (with upstreams, or the
// interval off). Relay runs it.
func (s *Server) RunHeartbeat(ctx context.Context) {
	t := s.heartbeat
	if t == nil {
		return
	}
	defer func() {
		t.cancel()
		t.mu.Lock()
		latest := t.latest
		t.latest = nil
		t.mu.Unlock()
		if latest != nil {
			latest.finish(errTrackEnded)
		}
	}()
	seq, at := heartbeatStart(time.Now(), s.heartbeatEvery)
	first := time.NewTimer(time.Until(at))
	select {
	case <-ctx.Done():
		first.Stop()
		return
	case <-first.C:
	}
	// A ticker never fires early, and drops the ticks its reader missed:
	// group seq+k leaves k intervals after seq at the earliest.
	tick := time.NewTicker(s.heartbeatEvery)
	defer tick.Stop()
	for {
		now := time.Now()
		g := newGroup(seq)
		g.append(AppendHeartbeat(make([]byte, 0, HeartbeatFrameLen), seq, now))
		g.finish(nil)
		t.startGroup(g) // not counted in groups in: no publisher sent it

		seq++
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
