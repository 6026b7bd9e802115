// Package procstat is the one way to measure a relay process: its CPU
// time and resident memory (/proc/PID/stat, /proc/PID/status), its open
// sockets (/proc/PID/fd), the datagrams the kernel dropped at its UDP
// sockets (/proc/PID/net/udp and udp6, by socket inode) and the UDP
// counters of its network namespace (/proc/PID/net/snmp: RcvbufErrors,
// SndbufErrors, ...).
//
// One parser, fed from either source: Read collects the files from this
// machine's /proc (a local process, or a lab box's process seen from the
// host), Script prints the same files on a box (run it over SSH) and
// Files.Add collects its output lines; Parse turns either into a Sample.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times on Linux.
const ClockTicks = 100

// The files of one process a Sample is read from, named relative to
// /proc/PID. FileFD is not a file: one socket inode per line, from the
// links in /proc/PID/fd.
const (
	FileStat   = "stat"
	FileStatus = "status"
	FileSNMP   = "net/snmp"
	FileUDP    = "net/udp"
	FileUDP6   = "net/udp6"
	FileFD     = "fd"
)

var files = []string{FileStat, FileStatus, FileSNMP, FileUDP, FileUDP6}

// Sample is one reading of a process.
type Sample struct {
	// CPU is the user plus system time the process has used.
	CPU time.Duration
	// RSS is its resident memory (VmRSS), in bytes.
	RSS int64
	// Sockets counts its open sockets; UDPDrops sums the drops column of
	// its UDP sockets' lines (their receive buffers full).
	Sockets  int
	UDPDrops int64
	// UDP is the Udp: counters of its network namespace (/proc/net/snmp:
	// InDatagrams, RcvbufErrors, SndbufErrors, ...); nil when unknown.
	UDP map[string]int64
}

// RcvbufErrors is UDP's RcvbufErrors counter, or -1 when unknown.
func (s Sample) RcvbufErrors() int64 {
	if n, ok := s.UDP["RcvbufErrors"]; ok {
		return n
	}
	return -1
}

// Files holds the text of a process's files by name (FileStat, ...).
type Files map[string]string

// LinePrefix starts each line Script prints: "procstat FILE LINE".
const LinePrefix = "procstat "

// Script is a shell snippet that prints the files of the process whose
// PID the shell expression pid gives (e.g. "$pid"), each line as
// "procstat FILE LINE", for Files.Add. Files it cannot read are left
// out.
func Script(pid string) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "sed 's|^|%s%s |' \"/proc/%s/%s\" 2>/dev/null\n", LinePrefix, f, pid, f)
	}
	fmt.Fprintf(&b, "for f in \"/proc/%s/fd/\"*; do readlink \"$f\"; done 2>/dev/null | sed -n 's|^socket:\\[\\([0-9]*\\)\\]$|%s%s \\1|p'\n", pid, LinePrefix, FileFD)
	return b.String()
}

// Add takes one line of Script's output into f; it reports whether the
// line was one.
func (f Files) Add(line string) bool {
	rest, ok := strings.CutPrefix(line, LinePrefix)
	if !ok {
		return false
	}
	name, text, _ := strings.Cut(rest, " ")
	f[name] += text + "\n"
	return true
}

// Read reads process pid's files under root (normally "/proc") and
// parses them.
func Read(root string, pid int) (Sample, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	f := Files{}
	for _, name := range files {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			f[name] = string(data)
		} else if name == FileStat {
			return Sample{}, fmt.Errorf("procstat: %w", err)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "fd")); err == nil {
		var b strings.Builder
		for _, e := range ents {
			l, err := os.Readlink(filepath.Join(dir, "fd", e.Name()))
			if ino, ok := socketInode(l); err == nil && ok {
				b.WriteString(ino + "\n")
			}
		}
		f[FileFD] = b.String()
	}
	return Parse(f)
}

func socketInode(link string) (string, bool) {
	rest, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return "", false
	}
	ino, ok := strings.CutSuffix(rest, "]")
	return ino, ok && ino != ""
}

// Parse reads a Sample from a process's files. The stat file is
// required; the others fill in what they can.
func Parse(f Files) (Sample, error) {
	var s Sample
	stat, ok := f[FileStat]
	if !ok {
		return s, errors.New("procstat: no stat file")
	}
	cpu, err := ParseStat(stat)
	if err != nil {
		return s, err
	}
	s.CPU = cpu
	if st, ok := f[FileStatus]; ok {
		if s.RSS, err = ParseRSS(st); err != nil {
			return s, err
		}
	}
	if sn, ok := f[FileSNMP]; ok {
		if s.UDP, err = ParseSNMP(sn); err != nil {
			return s, err
		}
	}
	inodes := strings.Fields(f[FileFD])
	s.Sockets = len(inodes)
	for _, name := range []string{FileUDP, FileUDP6} {
		drops, err := ParseUDPDrops(f[name], inodes)
		if err != nil {
			return s, err
		}
		s.UDPDrops += drops
	}
	return s, nil
}

// ParseStat reads the user plus system CPU time from /proc/PID/stat
// (fields 14 and 15, in ClockTicks).
func ParseStat(text string) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses; the
	// fields resume after the last ')'.
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, fmt.Errorf("procstat: stat %.40q: no command name", text)
	}
	fs := strings.Fields(text[i+1:])
	if len(fs) < 13 {
		return 0, fmt.Errorf("procstat: stat: %d fields after the command name, want at least 13", len(fs))
	}
	ut, err1 := strconv.ParseInt(fs[11], 10, 64)
	st, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("procstat: stat: %w", err)
	}
	return time.Duration(ut+st) * time.Second / ClockTicks, nil
}

// ParseRSS reads VmRSS from /proc/PID/status, in bytes.
func ParseRSS(text string) (int64, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procstat: status: VmRSS %q: %w", strings.TrimSpace(rest), err)
			}
			return kb << 10, nil
		}
	}
	return 0, nil // a zombie or kernel thread has none
}

// ParseSNMP reads the Udp: counters of /proc/net/snmp (a line of names,
// then a line of values).
func ParseSNMP(text string) (map[string]int64, error) {
	var names []string
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, "Udp:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if names == nil {
			names = fs
			continue
		}
		if len(fs) != len(names) {
			return nil, fmt.Errorf("procstat: snmp: %d Udp values for %d names", len(fs), len(names))
		}
		out := make(map[string]int64, len(names))
		for i, v := range fs {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("procstat: snmp: Udp %s %q: %w", names[i], v, err)
			}
			out[names[i]] = n
		}
		return out, nil
	}
	return nil, errors.New("procstat: snmp: no Udp: lines")
}

// ParseUDPDrops sums the drops column of the lines of a /proc/net/udp or
// udp6 file whose socket inode is in inodes.
func ParseUDPDrops(text string, inodes []string) (int64, error) {
	var sum int64
	err := udpLines(text, func(inode string, drops func() (int64, error)) (bool, error) {
		if !slices.Contains(inodes, inode) {
			return false, nil
		}
		n, err := drops()
		sum += n
		return false, err
	})
	return sum, err
}

// SocketDrops is the drops column of socket inode's line in a
// /proc/net/udp or udp6 file, and whether the file has that line.
func SocketDrops(text, inode string) (drops int64, found bool, err error) {
	err = udpLines(text, func(ino string, d func() (int64, error)) (bool, error) {
		if ino != inode {
			return false, nil
		}
		found = true
		drops, err = d()
		return true, err
	})
	return drops, found, err
}

// udpLines calls line for each socket line of a /proc/net/udp-format
// text with its inode and a reader of its drops column, until it returns
// true or an error.
func udpLines(text string, line func(inode string, drops func() (int64, error)) (bool, error)) error {
	for i, l := range strings.Split(text, "\n") {
		fs := strings.Fields(l)
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
		if i == 0 || len(fs) < 13 {
			continue
		}
		last := fs[len(fs)-1]
		stop, err := line(fs[9], func() (int64, error) {
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procstat: udp: drops %q: %w", last, err)
			}
			return n, nil
		})
		if stop || err != nil {
			return err
		}
	}
	return nil
}
