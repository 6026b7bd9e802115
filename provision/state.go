package provision

import (
	"cmp"
	"github.com/relayfleet/relayfleet/internal/text"

	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/relayfleet/relayfleet/sysctl"
	"github.com/relayfleet/relayfleet/units"
)

// HostState is what a relay host is made of: files by content hash, the
// relay instances that run, the sysctl values and the active release.
// Desired builds it from a layout; Probe reads it off a box.
type HostState struct {
	// Files maps a path on the box to its content's SHA-256.
	Files map[string]string
	// Instances are the relay@PORT.service units that run.
	Instances []string
	Sysctl    map[string]string
	Release   string
	// Floors marks desired sysctl values that are minimums (a larger
	// value on the box is fine).
	Floors map[string]bool
	// SysctlRefused holds keys the box's kernel refused to take, with the
	// value refused (read-only here, as inside a container). They are not
	// drift until the desired value changes or the box reboots.
	SysctlRefused map[string]string
	// ResetSecret is the state of the box's stateless reset secret
	// (units.ResetSecretFile): SecretPrivate, SecretOpen or SecretAbsent.
	// Its content is made on the box and known nowhere else, so only its
	// state is compared.
	ResetSecret string `json:",omitempty"`
	// Running maps each instance found running to what its process
	// runs (Releases.Running): a process on another release than the
	// current one was left behind by a cut-off rollout. Probe sets it; a
	// desired state has none.
	Running map[string]string `json:",omitempty"`
	// Draining lists the instances found draining, as a cut-off
	// rollout leaves one. Probe sets it; a desired state has none.
	Draining []string `json:",omitempty"`
	// RolloutDrained lists the instances a rollout marked as drained by
	// it and did not finish (drainmark.go): converge undrains these, and
	// only these. Probe sets it; a desired state has none.
	RolloutDrained []string `json:",omitempty"`
	// ReleaseDropIns maps each instance found with a release drop-in
	// (dropin.go) to the release the drop-in runs: a rollout cut off
	// before its canary passed left it, and the instance's next start
	// runs that release, not current. Probe sets it; a desired state has
	// none.
	ReleaseDropIns map[string]string `json:",omitempty"`
}

// Plan is a host's desired state with the bytes to write.
type Plan struct {
	State   HostState
	Content map[string][]byte
	Profile sysctl.Profile
}

// Desired is what a host with this layout should be, running the release
// with the given sha.
func Desired(l units.Layout, release string) (*Plan, error) {
	files, err := units.Render(l)
	if err != nil {
		return nil, err
	}
	prof := sysctl.Relay()
	conf, err := prof.Render()
	if err != nil {
		return nil, err
	}
	p := &Plan{
		State:   HostState{Files: map[string]string{}, Sysctl: map[string]string{}, Floors: map[string]bool{}, Release: release, ResetSecret: SecretPrivate},
		Content: map[string][]byte{},
		Profile: prof,
	}
	add := func(path string, data []byte) {
		p.Content[path] = data
		p.State.Files[path] = Digest(data)
	}
	add(prof.File, conf)
	for _, f := range files {
		add(f.Path, f.Data)
		if inst, ok := instanceOf(f.Path); ok {
			p.State.Instances = append(p.State.Instances, inst)
		}
	}
	for _, s := range prof.Settings {
		p.State.Sysctl[s.Key] = s.Value
		p.State.Floors[s.Key] = s.AtLeast
	}
	sort.Strings(p.State.Instances)
	return p, nil
}

// ForBox is the plan for a box whose kernel has the sysctl values
// current: its sysctl file holds the larger of each floor and the box's
// value (sysctl.Profile.Raised), so that writing and loading it never
// lowers what an operator set higher. The plan it is called on is left
// as it was.
func (p *Plan) ForBox(current map[string]string) (*Plan, error) {
	if p.Profile.File == "" || p.State.Files[p.Profile.File] == "" {
		return p, nil // a plan without the sysctl file
	}
	conf, err := p.Profile.Raised(current).Render()
	if err != nil {
		return nil, err
	}
	q := *p
	q.Content = maps.Clone(p.Content)
	q.State.Files = maps.Clone(p.State.Files)
	q.Content[p.Profile.File] = conf
	q.State.Files[p.Profile.File] = Digest(conf)
	return &q, nil
}

// DesiredAuth is Desired for relays that verify tokens: the fleet's relay
// key file (BoxKeyFile; CheckBoxKeyFile refuses a private signing key
// in it) is installed at
// units.CredentialFile, root's alone, and handed to each relay as a
// systemd credential. A changed key file restarts every relay process.
func DesiredAuth(l units.Layout, release string, authKeys []byte) (*Plan, error) {
	return DesiredRelay(l, release, authKeys, nil)
}

// DesiredRelay is DesiredAuth with the box's relay TLS key (BoxTLSKey)
// when tlsKey is not nil: installed at units.TLSKeyFile, root's alone,
// and handed to each relay as a systemd credential for relay serve
// --tls-key, so that every process serves certificates for the key the
// router pins. A changed key restarts every relay process.
func DesiredRelay(l units.Layout, release string, authKeys, tlsKey []byte) (*Plan, error) {
	if tlsKey != nil {
		if _, err := TLSKeySPKI(tlsKey); err != nil {
			return nil, err
		}
		l.TLSKey = true
	}
	if len(authKeys) == 0 {
		return nil, ErrNoAuthKey
	}
	if err := CheckBoxKeyFile(string(authKeys)); err != nil {
		return nil, err
	}
	l.Auth = true
	p, err := Desired(l, release)
	if err != nil {
		return nil, err
	}
	p.Content[units.CredentialFile] = authKeys
	p.State.Files[units.CredentialFile] = Digest(authKeys)
	if tlsKey != nil {
		p.Content[units.TLSKeyFile] = tlsKey
		p.State.Files[units.TLSKeyFile] = Digest(tlsKey)
	}
	return p, nil
}

// private reports whether path holds a secret: written 0600 root in a
// 0700 directory, never shown.
func private(path string) bool {
	return strings.HasPrefix(path, units.CredentialDir+"/")
}

// instanceOf returns "relay@4443.service" for the drop-in path
// /etc/systemd/system/relay@4443.service.d/10-relayfleet.conf.
func instanceOf(p string) (string, bool) {
	dir := path.Base(path.Dir(p))
	inst, ok := strings.CutSuffix(dir, ".service.d")
	if !ok || !strings.HasPrefix(inst, "relay@") {
		return "", false
	}
	return inst + ".service", true
}

// Change kinds.
const (
	ChangeFile    = "file"
	ChangeRemove  = "remove"
	ChangeSysctl  = "sysctl"
	ChangeStart   = "start"
	ChangeStop    = "stop"
	ChangeRestart = "restart"
	ChangeRelease = "release"
	ChangeSecret  = "secret"
	// ChangeStale restarts an instance whose process runs another release
	// than the current one, make before break (Move), From being what it
	// runs.
	ChangeStale = "stale"
	// ChangeUndrain makes an instance a cut-off rollout left draining
	// admit again, and takes the rollout's drain mark off.
	ChangeUndrain = "undrain"
	// ChangeDrain drains again an instance drained on purpose, after
	// the restart before it in the list (a restart admits).
	ChangeDrain = "drain"
	// ChangeDropIn removes the release drop-in a cut-off rollout left on
	// an instance that this converge does not restart, From being the
	// release the drop-in runs and To current's. Nothing restarts: the
	// process runs current already (or is stopped).
	ChangeDropIn = "dropin"
)

// Change is one difference between desired and actual.
type Change struct {
	Kind string
	// What: a path, a sysctl key, a unit or a release.
	What string
	// From and To are short descriptions (hashes, values, releases).
	From, To string
}

func (c Change) String() string {
	switch c.Kind {
	case ChangeFile:
		if c.From == "" {
			return "create " + c.What
		}
		return "update " + c.What
	case ChangeRemove:
		return "remove " + c.What
	case ChangeSecret:
		if c.From == SecretOpen {
			return "make " + c.What + " root's alone"
		}
		return "create " + c.What + " (random, on the box)"
	case ChangeSysctl:
		return fmt.Sprintf("sysctl %s: %s -> %s", c.What, orNone(c.From), c.To)
	case ChangeRelease:
		return fmt.Sprintf("release %s -> %s", text.ShortSHA(c.From), text.ShortSHA(c.To))
	case ChangeStale:
		return fmt.Sprintf("restart %s: it runs %s, not the current release %s (moved out first)", c.What, text.ShortSHA(c.From), text.ShortSHA(c.To))
	case ChangeUndrain:
		return "undrain " + c.What + " (left draining by a cut-off rollout)"
	case ChangeDrain:
		return "drain " + c.What + " again after its restart (drained on purpose)"
	case ChangeDropIn:
		if c.From != "" && c.From != c.To {
			return fmt.Sprintf("remove %s's release drop-in (left by a cut-off rollout: its next start would run release %s, not current)", c.What, text.ShortSHA(c.From))
		}
		return "remove " + c.What + "'s release drop-in (left by a cut-off rollout)"
	}
	return c.Kind + " " + c.What
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Diff lists what converging actual to desired changes, in the order it
// is applied: files, sysctl, release, then units. It restarts only what a
// change touches: a new template or release restarts every instance that
// keeps running; a changed drop-in restarts its instance; new instances
// start, instances no longer wanted stop and lose their drop-in. A
// release drop-in a cut-off rollout left goes with the files; an instance
// that starts or restarts here loses it on the way (Apply), one that does
// not keeps its process.
func Diff(desired, actual HostState) []Change {
	var cs []Change
	paths := make([]string, 0, len(desired.Files))
	for p := range desired.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	changed := map[string]bool{}
	for _, p := range paths {
		if have := actual.Files[p]; have != desired.Files[p] {
			cs = append(cs, Change{Kind: ChangeFile, What: p, From: have, To: desired.Files[p]})
			changed[p] = true
		}
	}
	var stale []string
	for p := range actual.Files {
		if _, ok := desired.Files[p]; !ok {
			if _, isInst := instanceOf(p); isInst {
				stale = append(stale, p)
			}
		}
	}
	sort.Strings(stale)
	for _, p := range stale {
		cs = append(cs, Change{Kind: ChangeRemove, What: p})
	}
	dropInsAt := len(cs) // after the files, as Apply removes them
	// A new reset secret restarts nothing: each relay process loads it
	// at its next start (a changed template restarts them below).
	if desired.ResetSecret != "" && actual.ResetSecret != desired.ResetSecret {
		cs = append(cs, Change{Kind: ChangeSecret, What: units.ResetSecretFile, From: actual.ResetSecret, To: desired.ResetSecret})
	}
	keys := make([]string, 0, len(desired.Sysctl))
	for k := range desired.Sysctl {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := sysctl.Setting{Key: k, Value: desired.Sysctl[k], AtLeast: desired.Floors[k]}
		if !want.Satisfied(actual.Sysctl[k]) && actual.SysctlRefused[k] != want.Value {
			cs = append(cs, Change{Kind: ChangeSysctl, What: k, From: actual.Sysctl[k], To: desired.Sysctl[k]})
		}
	}
	releaseChanged := desired.Release != "" && desired.Release != actual.Release
	if releaseChanged {
		cs = append(cs, Change{Kind: ChangeRelease, What: "relay", From: actual.Release, To: desired.Release})
	}
	templateChanged := false
	for p := range changed {
		// A new key file (auth or TLS) reaches a relay when it restarts:
		// systemd copies the credential at start.
		if path.Base(p) == units.TemplateName || p == units.CredentialFile || p == units.TLSKeyFile {
			templateChanged = true
		}
	}
	running := map[string]bool{}
	for _, u := range actual.Instances {
		running[u] = true
	}
	draining := map[string]bool{}
	for _, u := range actual.Draining {
		draining[u] = true
	}
	rolloutDrained := map[string]bool{}
	for _, u := range actual.RolloutDrained {
		rolloutDrained[u] = true
	}
	started := map[string]bool{} // started or restarted here
	for _, u := range desired.Instances {
		dropIn := "/etc/systemd/system/" + strings.TrimSuffix(u, ".service") + ".service.d/10-relayfleet.conf"
		runs := actual.Running[u]
		restarts := true
		switch {
		case !running[u]:
			cs = append(cs, Change{Kind: ChangeStart, What: u})
			started[u] = true
			continue
		case templateChanged || changed[dropIn]:
			cs = append(cs, Change{Kind: ChangeRestart, What: u})
		case releaseChanged:
			// A new release reaches a process that may hold listeners
			// (an event's burst box after a fleet rollout): moved out
			// first, one at a time, as a rollout moves them.
			cs = append(cs, Change{Kind: ChangeStale, What: u, From: cmp.Or(runs, actual.Release), To: desired.Release})
		case desired.Release != "" && runs != "" && runs != desired.Release:
			// current is right, the process is not: a rollout was cut off.
			cs = append(cs, Change{Kind: ChangeStale, What: u, From: runs, To: desired.Release})
		default:
			restarts = false
		}
		started[u] = restarts
		// Who drained it decides (drainmark.go): a rollout that was cut
		// off is finished; a drain on purpose stays, through a restart.
		switch {
		case rolloutDrained[u]:
			cs = append(cs, Change{Kind: ChangeUndrain, What: u})
		case draining[u] && restarts:
			cs = append(cs, Change{Kind: ChangeDrain, What: u})
		}
	}
	for _, u := range actual.Instances {
		if !slices.Contains(desired.Instances, u) {
			cs = append(cs, Change{Kind: ChangeStop, What: u})
		}
	}
	// A release drop-in makes the instance's next start (systemd's
	// Restart= after a crash, an operator's restart) run the release being
	// tried when the rollout was cut off, not current: it goes, on
	// instances that run current, are stopped or are no longer wanted.
	current := desired.Release
	if current == "" {
		current = actual.Release
	}
	var dropIns []Change
	for _, u := range slices.Sorted(maps.Keys(actual.ReleaseDropIns)) {
		if !started[u] {
			dropIns = append(dropIns, Change{Kind: ChangeDropIn, What: u, From: actual.ReleaseDropIns[u], To: current})
		}
	}
	return slices.Insert(cs, dropInsAt, dropIns...)
}
