package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// LiveLines keeps one line per host on a terminal and rewrites it in
// place as the host moves through its steps.
type LiveLines struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	order []string
	state map[string]string
	drawn int
}

// NewLiveLines draws a line for each of hosts, "waiting", on w.
func NewLiveLines(w io.Writer, hosts []string) *LiveLines {
	l := &LiveLines{w: w, start: time.Now(), order: hosts, state: map[string]string{}}
	for _, h := range hosts {
		l.state[h] = "waiting"
	}
	l.draw()
	return l
}

// Set records a host's step and redraws.
func (l *LiveLines) Set(host, step string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state[host] = fmt.Sprintf("%-10s %5.1fs", step, time.Since(l.start).Seconds())
	l.draw()
}

func (l *LiveLines) draw() {
	if l.drawn > 0 {
		fmt.Fprintf(l.w, "\033[%dA", l.drawn) // back to the first line
	}
	for _, h := range l.order {
		fmt.Fprintf(l.w, "\r\033[K  %-20s %s\n", h, l.state[h])
	}
	l.drawn = len(l.order)
}
