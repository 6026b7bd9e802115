package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// procHit is a process whose command line or environment holds the
// needle.
type procHit struct {
	Dir  string // /proc/PID
	File string // "cmdline" or "environ"
	Line string // for the report: the comm, and the file with the needle masked
}

// procDirs lists /proc/PID for every process now.
func procDirs() []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	return dirs
}

// vanished says whether err is what reading a process's file gives once
// the process is gone: ENOENT, or ESRCH.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// parentOf is the parent pid of the process of /proc/PID dir d, 0 when
// it cannot be read.
func parentOf(d string) int {
	stat, err := os.ReadFile(filepath.Join(d, "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	var state string
	var ppid int
	if _, err := fmt.Sscan(string(stat[i+1:]), &state, &ppid); err != nil {
		return 0
	}
	return ppid
}

// ours says whether the process of dir d is this test process or one it
// started, directly or not: the processes a fleet command it runs can
// start.
func ours(d string) bool {
	self := os.Getpid()
	pid, err := strconv.Atoi(filepath.Base(d))
	for range 64 {
		if err != nil || pid <= 1 {
			return false
		}
		if pid == self {
			return true
		}
		pid = parentOf(fmt.Sprintf("/proc/%d", pid))
	}
	return false
}

// scanProcs reads the command line and the environment of each process
// dir (/proc/PID) once and returns where it found needle. A read error
// other than a vanished process's (vanished) is returned too, one per
// file: a scanner that cannot read a process cannot say the needle is
// not there. Only a process the test did not start may refuse the read
// (EACCES: a sandbox's own processes, another user's), since no fleet
// command can have put the token there.
func scanProcs(dirs []string, needle []byte) (hits []procHit, errs []error) {
	for _, d := range dirs {
		comm, _ := os.ReadFile(filepath.Join(d, "comm"))
		for _, f := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				if !vanished(err) && !(errors.Is(err, fs.ErrPermission) && !ours(d)) {
					errs = append(errs, err)
				}
				continue
			}
			if !bytes.Contains(data, needle) {
				continue
			}
			shown := strings.ReplaceAll(string(data), "\x00", " ")
			shown = strings.ReplaceAll(shown, string(needle), "[TOKEN]")
			if len(shown) > 300 {
				shown = shown[:300] + "..."
			}
			hits = append(hits, procHit{Dir: d, File: f, Line: fmt.Sprintf("%s (%s) %s: %s", d, strings.TrimSpace(string(comm)), f, shown)})
		}
	}
	return hits, errs
}
