package cpupin

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pinning puts a child (the relay) on one CPU, alone, as a relay@ unit
// runs (CPUAffinity= one CPU, so Go's GOMAXPROCS is 1), and this process
// (the publisher, the load generator, the kernel floor) on the others, so
// that the load neither competes with the relay for its core nor runs
// short of one.
type Pinning struct {
	relay, rest unix.CPUSet
	// Desc says where what runs, for the bench's output.
	Desc string
}

// Pin moves every thread of this process off the first CPU it may use;
// nil when fewer than two are usable.
func Pin() (*Pinning, error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := range 1024 {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return nil, nil
	}
	p := &Pinning{}
	p.relay.Set(cpus[0])
	for _, c := range cpus[1:] {
		p.rest.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may have exited since the listing: not an error.
		if err := unix.SchedSetaffinity(tid, &p.rest); err != nil && err != unix.ESRCH {
			return nil, fmt.Errorf("sched_setaffinity: %w", err)
		}
	}
	p.Desc = fmt.Sprintf("the relay on CPU %d alone (GOMAXPROCS 1, as a relay@ unit with CPUAffinity= runs); the publisher, load generator and floor on the other %d", cpus[0], len(cpus)-1)
	return p, nil
}

// Start starts cmd on the relay's CPU: a child inherits the affinity of
// the thread that forks it. A nil Pinning starts cmd unpinned.
func (p *Pinning) Start(cmd *exec.Cmd) error {
	if p == nil {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.SchedSetaffinity(0, &p.relay); err != nil {
		return fmt.Errorf("sched_setaffinity: %w", err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &p.rest); rerr != nil && err == nil {
		err = fmt.Errorf("sched_setaffinity: %w", rerr)
	}
	return err
}
