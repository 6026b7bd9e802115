package events

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/units"
)

// trust is who may own what the reconciler's service runs or reads, and
// every directory above it: root, TimerOptions.Owner and the user the
// service runs as. Anyone else who could change one of those files could
// choose what the service does, as root for the default User.
type trust struct {
	uids []uint32 // besides root
}

// newTrust is the trust of a service run as userName ("" = root), with
// owner trusted too. A user that cannot be looked up adds no one.
func newTrust(owner uint32, userName string) trust {
	var t trust
	add := func(uid uint32) {
		if uid != 0 && !slices.Contains(t.uids, uid) {
			t.uids = append(t.uids, uid)
		}
	}
	add(owner)
	if userName != "" {
		if uid, err := lookupUID(userName); err == nil {
			add(uid)
		}
	}
	return t
}

// lookupUID is the uid of a user name, or of a number as systemd's User=
// takes it.
func lookupUID(name string) (uint32, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err
}

func (t trust) trusted(uid uint32) bool { return uid == 0 || slices.Contains(t.uids, uid) }

// who names the trusted owners: "root", or "root or uid 1000 (alice)".
func (t trust) who() string {
	names := []string{"root"}
	for _, uid := range t.uids {
		names = append(names, ownerName(uid))
	}
	return strings.Join(names, " or ")
}

// ownerName is "uid 1000 (alice)", or "uid 1000" for a uid without a name.
func ownerName(uid uint32) string {
	s := "uid " + strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil && u.Username != "" {
		s += " (" + u.Username + ")"
	}
	return s
}

// untrusted is a path that someone the trust leaves out could change.
// fix, when not "", is the one command that makes it right (chmod go-w
// DIR); otherwise the caller says what to do for its field.
type untrusted struct {
	msg string
	fix string
}

func (e *untrusted) Error() string { return e.msg }

func untrustedf(fix, format string, args ...any) error {
	return &untrusted{msg: fmt.Sprintf(format, args...), fix: fix}
}

// goWritable says a mode lets group or others write.
func goWritable(m fs.FileMode) bool { return m.Perm()&0o022 != 0 }

// octal is a file's permissions as chmod takes them, the sticky bit
// included: 0755, 01777.
func octal(m fs.FileMode) string {
	perm := uint32(m.Perm())
	if sticky(m) {
		perm |= 0o1000
	}
	return fmt.Sprintf("%#o", perm)
}

// sticky says a directory lets only an entry's owner rename or delete it
// (/tmp): others' writing it cannot replace what is root's.
func sticky(m fs.FileMode) bool { return m&fs.ModeSticky != 0 }

// resolve follows the absolute path from / one name at a time, as the
// kernel does, and checks on the way every directory it enters and every
// symlink it follows: each must be trusted's, and no directory writable
// by others unless sticky. It returns the path resolved and what it names
// (Lstat, never a symlink). When a name does not exist, the error is
// Lstat's (errors.Is fs.ErrNotExist) and the path returned is the
// deepest directory that does.
func (t trust) resolve(path string) (string, fs.FileInfo, error) {
	if !filepath.IsAbs(path) {
		return "", nil, fmt.Errorf("%s is not an absolute path", path)
	}
	cur := "/"
	if err := t.enter(path, cur); err != nil {
		return "", nil, err
	}
	rest, links := path, 0
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			fi, err := os.Lstat(cur)
			return cur, fi, err
		}
		name, after, _ := strings.Cut(rest, "/")
		rest = after
		switch name {
		case ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return cur, nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > 40 {
				return "", nil, fmt.Errorf("%s: too many symlinks", path)
			}
			if uid := fileOwner(fi); !t.trusted(uid) {
				if next == path {
					return "", nil, untrustedf("", "%s is a symlink owned by %s, not %s", path, ownerName(uid), t.who())
				}
				return "", nil, untrustedf("", "%s goes through %s, a symlink owned by %s, not %s", path, next, ownerName(uid), t.who())
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = target + "/" + rest
			continue
		}
		if strings.Trim(rest, "/") == "" {
			return next, fi, nil
		}
		if !fi.IsDir() {
			return "", nil, fmt.Errorf("%s: %s is not a directory", path, next)
		}
		if err := t.enter(path, next); err != nil {
			return "", nil, err
		}
		cur = next
	}
}

// enter checks dir, a directory that path is under.
func (t trust) enter(path, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	switch uid := fileOwner(fi); {
	case !t.trusted(uid):
		return untrustedf("", "%s is under %s, owned by %s, not %s, who could replace it", path, dir, ownerName(uid), t.who())
	case goWritable(fi.Mode()) && !sticky(fi.Mode()):
		return untrustedf("chmod go-w "+dir, "%s is under %s, mode %s, writable by others, who could replace it", path, dir, octal(fi.Mode()))
	}
	return nil
}

// file checks a file the service reads, or with exec runs: the file it
// resolves to is a regular file, trusted's and writable by no one else,
// and so is every directory and symlink on the way (resolve).
func (t trust) file(path string, exec bool) error {
	real, fi, err := t.resolve(path)
	if err != nil {
		return err
	}
	name := path
	if real != path {
		name = path + " (" + real + ")"
	}
	switch uid := fileOwner(fi); {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", name)
	case !t.trusted(uid):
		return untrustedf("", "%s is owned by %s, not %s", name, ownerName(uid), t.who())
	case goWritable(fi.Mode()):
		return untrustedf("chmod go-w "+real, "%s is mode %s, writable by others", name, octal(fi.Mode()))
	case exec && fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", name)
	}
	return nil
}

// beside checks the file named name in path's directory, which the
// service reads when it exists (inventories.Beside): when it does, as
// file does; when not, no one else may put it there, sticky directory or
// not.
func (t trust) beside(path, name string) error {
	sib := filepath.Join(filepath.Dir(path), name)
	err := t.file(sib, false)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir, fi, err := t.resolve(filepath.Dir(path))
	if err != nil {
		return err
	}
	if goWritable(fi.Mode()) {
		return untrustedf(chmodFix(dir, fi.Mode()), "%s is in %s, mode %s, where others could put the %s it reads if there", path, dir, octal(fi.Mode()), name)
	}
	return nil
}

// dir checks a directory the service keeps state in: trusted's and
// writable by no one else, sticky or not, as is every directory and
// symlink on the way (resolve); with walk, everything in it too, and
// what each symlink in it points to (linkIn), but for the links named in
// relinked (paths relative to path) that the service makes again before
// it uses them. A directory that does not exist yet passes when the
// deepest one above it that does lets no one else make it: the service
// makes it, as its user, when it first runs.
func (t trust) dir(path string, walk bool, relinked ...string) error {
	real, fi, err := t.resolve(path)
	if errors.Is(err, fs.ErrNotExist) && real != "" {
		above, serr := os.Stat(real)
		if serr != nil {
			return serr
		}
		if goWritable(above.Mode()) {
			return untrustedf(chmodFix(real, above.Mode()), "%s does not exist yet, and %s, mode %s, lets others make it first", path, real, octal(above.Mode()))
		}
		return nil
	}
	if err != nil {
		return err
	}
	name := path
	if real != path {
		name = path + " (" + real + ")"
	}
	switch uid := fileOwner(fi); {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", name)
	case !t.trusted(uid):
		return untrustedf("", "%s is owned by %s, not %s", name, ownerName(uid), t.who())
	case goWritable(fi.Mode()):
		return untrustedf(chmodFix(real, fi.Mode()), "%s is mode %s, writable by others", name, octal(fi.Mode()))
	}
	if !walk {
		return nil
	}
	return filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == real {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		switch uid := fileOwner(fi); {
		case !t.trusted(uid):
			return untrustedf("", "%s holds %s, owned by %s, not %s", name, p, ownerName(uid), t.who())
		case m&fs.ModeSymlink == 0 && goWritable(m) && !(m.IsDir() && sticky(m)):
			return untrustedf("chmod go-w "+p, "%s holds %s, mode %s, writable by others", name, p, octal(m))
		case m&fs.ModeSymlink != 0:
			if rel, err := filepath.Rel(real, p); err == nil && slices.Contains(relinked, rel) {
				return nil
			}
			return t.linkIn(name, p)
		}
		return nil
	})
}

// linkIn checks link, a symlink (trusted's) that dir name holds: what it
// points to, and every directory and symlink on the way there, is
// trusted's and writable by no one else. A link to nothing passes: the
// directories on the way, checked, let no one else make its target.
func (t trust) linkIn(name, link string) error {
	target, fi, err := t.resolve(link)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var u *untrusted
	if errors.As(err, &u) {
		return untrustedf(u.fix, "%s holds %s, a link: %s", name, link, u.msg)
	}
	if err != nil {
		return err
	}
	m := fi.Mode()
	switch uid := fileOwner(fi); {
	case !t.trusted(uid):
		return untrustedf("", "%s holds %s, a link to %s, which is owned by %s, not %s", name, link, target, ownerName(uid), t.who())
	case goWritable(m) && !(m.IsDir() && sticky(m)):
		return untrustedf("chmod go-w "+target, "%s holds %s, a link to %s, mode %s, writable by others", name, link, target, octal(m))
	}
	return nil
}

// chmodFix is chmod go-w DIR, unless DIR is sticky: a sticky directory
// writable by all is /tmp, which must stay so.
func chmodFix(dir string, m fs.FileMode) string {
	if sticky(m) {
		return ""
	}
	return "chmod go-w " + dir
}

// checkFiles checks, with t, every path the service r describes runs or
// reads (what fleet events reconcile reads, as its Open does): the fleet
// binary and the relay build beside it, the events file, the providers
// file beside it, the fleet file it names and the calibration file beside
// that, the state dir and everything in it (the file backend, the
// passphrase, PULUMI_HOME and what every link in it points to, but for
// the links to the Pulumi CLI and the provider plugin, which each run
// makes again), the environment file, the paths given after -- (reconcileArgs),
// and the Pulumi CLI the service finds without --pulumi. fleetFile is the
// events file's fleet file; fleetDefault and stateDefault say Fleet and
// StateDir are InstallTimer's defaults. Errors are *TimerFieldError.
func checkFiles(r units.Reconciler, fleetFile string, t trust, fleetDefault, stateDefault bool) error {
	fleetFix := fmt.Sprintf("install it as root's (install -o root -g root -m 0755 %s /usr/local/bin/fleet) and give --fleet-binary /usr/local/bin/fleet", r.Fleet)
	if fleetDefault {
		fleetFix = "--fleet-binary defaults to this fleet command; " + fleetFix
	}
	if err := t.file(r.Fleet, true); err != nil {
		return fieldFix("Fleet", err, fleetFix)
	}
	args := reconcileArgs(r.ExtraArgs)
	if !slices.ContainsFunc(args, func(a pathArg) bool { return a.flag == "--relay-binary" }) {
		// Burst boxes run it, lab boxes on this host among them, when
		// the fleet has no recorded release (provision.RelayBinary).
		if exe, err := filepath.EvalSymlinks(r.Fleet); err == nil {
			relay := filepath.Join(filepath.Dir(exe), "relay")
			if _, err := os.Lstat(relay); err == nil {
				if err := t.file(relay, false); err != nil {
					return fieldFix("Relay", err, "chown root:root "+relay+", or give a build of root's with --relay-binary after --")
				}
			}
		}
	}

	eventsFix := "keep the events file, its fleet file and the providers.yaml and calibration.yaml beside them in a directory of root's, such as /etc/relayfleet (install -o root -g root -m 0644 FILE /etc/relayfleet/)"
	for _, err := range []error{
		t.file(r.Events, false),
		t.beside(r.Events, inventories.ProvidersFile),
		t.file(fleetFile, false),
		t.beside(fleetFile, inventories.CalibrationFile),
	} {
		if err != nil {
			return fieldFix("Events", err, eventsFix)
		}
	}

	stateFix := "give --state-dir a directory of root's, such as /var/lib/relayfleet/state"
	if _, err := os.Lstat(r.StateDir); err == nil {
		stateFix += ", or chown -R root:root " + r.StateDir
	}
	if stateDefault {
		stateFix = "--state-dir defaults to $" + program.StateDirEnv + ", else ~/.local/state/relayfleet of the user running install; " + stateFix
	}
	var relinked []string
	for _, l := range program.RelinkedPaths(r.StateDir) {
		if rel, err := filepath.Rel(r.StateDir, l); err == nil {
			relinked = append(relinked, rel)
		}
	}
	if err := t.dir(r.StateDir, true, relinked...); err != nil {
		return fieldFix("StateDir", err, stateFix)
	}

	if r.EnvironmentFile != "" {
		if err := t.env(r.EnvironmentFile); err != nil {
			return fieldFix("EnvironmentFile", err, fmt.Sprintf("chown root:root %s && chmod 600 %s, in a directory of root's, such as /etc/relayfleet", r.EnvironmentFile, r.EnvironmentFile))
		}
	}

	pulumiGiven := false
	for _, a := range args {
		field := fmt.Sprintf("ExtraArgs[%d]", a.index)
		if !filepath.IsAbs(a.path) {
			return timerErr(field, "%s %s: not an absolute path; the service runs in /", a.flag, a.path)
		}
		var err error
		var fix string
		switch a.use {
		case runs:
			err, fix = t.file(a.path, true), fmt.Sprintf("give %s a build of root's (install -o root -g root -m 0755 %s /usr/local/bin/)", a.flag, a.path)
		case reads:
			err, fix = t.file(a.path, false), fmt.Sprintf("give %s a file of root's, in a directory only root can write", a.flag)
		case keeps:
			err, fix = t.dir(a.path, false), fmt.Sprintf("give %s a directory of root's", a.flag)
		case keepsAll:
			err, fix = t.dir(a.path, true), fmt.Sprintf("give %s a directory of root's", a.flag)
		}
		if err != nil {
			return fieldFix(field, fmt.Errorf("%s: %w", a.flag, err), fix)
		}
		pulumiGiven = pulumiGiven || a.flag == "--pulumi"
	}
	if !pulumiGiven {
		if p := servicePulumi(r.User); p != "" {
			if err := t.file(p, true); err != nil {
				return fieldFix("Pulumi", err, fmt.Sprintf("chown root:root %s, or give a build of root's with --pulumi after --", p))
			}
		}
	}
	return nil
}

// env checks the environment file, which systemd reads as root and
// whose variables (PATH, the tokens) the service gets: as file does, and
// readable by no one else, as it holds tokens.
func (t trust) env(path string) error {
	if err := t.file(path, false); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return untrustedf("chmod 600 "+path, "%s is mode %s, readable beyond its owner; it holds tokens", path, octal(fi.Mode()))
	}
	return nil
}

// fieldFix is err as field's *TimerFieldError: an untrusted path gets the
// one command that fixes it, else fix.
func fieldFix(field string, err error, fix string) error {
	var u *untrusted
	if !errors.As(err, &u) {
		return &TimerFieldError{Field: field, Err: err}
	}
	if u.fix != "" {
		fix = u.fix
	}
	return timerErr(field, "%v; %s", err, fix)
}

// pathUse is what the service does with a path given after --.
type pathUse int

const (
	reads    pathUse = iota // a file it reads
	runs                    // a file it runs, or ships to boxes that run it
	keeps                   // a directory it keeps state in; what is in it is not checked (lab images are whole root file systems)
	keepsAll                // a directory it keeps state in, all of it checked
)

// reconcilePaths are fleet events reconcile's flags that name a path.
// --backend is a URL: only a file:// one names a directory.
var reconcilePaths = map[string]pathUse{
	"pulumi":       runs,
	"relay-binary": runs,
	"ssh-key":      reads,
	"lab-dir":      keeps,
	"lab-images":   keeps,
	"monitor-dir":  keeps,
	"backend":      keepsAll,
}

// pathArg is a path given after --: args[index] is the path.
type pathArg struct {
	index int
	flag  string
	path  string
	use   pathUse
}

// reconcileArgs finds the paths in reconcile flags (--flag VALUE or
// --flag=VALUE), as fleet events reconcile will parse them.
func reconcileArgs(args []string) []pathArg {
	var out []pathArg
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, eq := strings.Cut(a[2:], "=")
		use, ok := reconcilePaths[name]
		if !ok {
			continue
		}
		index := i
		if !eq {
			if i+1 == len(args) {
				break // reconcile says the value is missing
			}
			i++
			index, value = i, args[i]
		}
		if name == "backend" {
			p, ok := strings.CutPrefix(value, "file://")
			if !ok || !strings.HasPrefix(p, "/") {
				continue // another backend, or one Pulumi finds under ~
			}
			value, _, _ = strings.Cut(p, "?")
		}
		out = append(out, pathArg{index: index, flag: "--" + name, path: value, use: use})
	}
	return out
}

// systemdPATH is the PATH of a systemd service that sets none.
const systemdPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// servicePulumiCandidates are where the service looks for the Pulumi CLI
// without --pulumi (program.FindPulumi), in order, given its user's home.
// A variable: tests look elsewhere.
var servicePulumiCandidates = func(home string) []string {
	var c []string
	if home != "" {
		c = append(c, program.CachedPulumiIn(filepath.Join(home, ".cache")))
	}
	for _, dir := range filepath.SplitList(systemdPATH) {
		c = append(c, filepath.Join(dir, "pulumi"))
	}
	return c
}

// servicePulumi is the Pulumi CLI the service run as userName ("" =
// root) finds without --pulumi: the make pulumi build in its home's
// cache, else pulumi on systemd's PATH; "" for none. $RELAYFLEET_PULUMI
// or a PATH set in the environment file are not looked at.
func servicePulumi(userName string) string {
	if userName == "" {
		userName = "root"
	}
	var home string
	if uid, err := lookupUID(userName); err == nil {
		if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
			home = u.HomeDir
		}
	}
	for _, p := range servicePulumiCandidates(home) {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
