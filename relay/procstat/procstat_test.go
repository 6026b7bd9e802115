package procstat_test

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/procstat"
)

func linux(t *testing.T) {
	if runtime.GOOS != "linux" {
		testutil.Skipf(t, "reads /proc, Linux only")
	}
}

// tinyUDP is a UDP socket with a receive buffer of a few datagrams, and a
// sender that floods it.
func tinyUDP(t *testing.T) (*net.UDPConn, func(n int)) {
	t.Helper()
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	raw, err := rc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
	sc, err := net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return rc, func(n int) {
		buf := make([]byte, 1000)
		for range n {
			_, _ = sc.Write(buf)
		}
	}
}

// TestReadSeesTheFaults: reading this test's own process, the figures
// move with what the process does: CPU with a busy loop, sockets with a
// socket opened, the socket's drops and the namespace's RcvbufErrors
// with datagrams flooded at a tiny, unread receive buffer.
func TestReadSeesTheFaults(t *testing.T) {
	linux(t)
	pid := os.Getpid()
	before, err := procstat.Read("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS <= 0 || before.UDP == nil || before.RcvbufErrors() < 0 {
		t.Fatalf("before = %+v, want RSS and the Udp counters", before)
	}
	// CPU: spin until the kernel has counted a few ticks.
	deadline := time.Now().Add(time.Minute)
	var after procstat.Sample
	for x := 0; ; x++ {
		if x%1_000_000 == 0 {
			if after, err = procstat.Read("/proc", pid); err != nil {
				t.Fatal(err)
			}
			if after.CPU-before.CPU >= 50*time.Millisecond {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CPU went from %v to %v after a minute of spinning", before.CPU, after.CPU)
			}
		}
	}
	_, flood := tinyUDP(t)
	opened, err := procstat.Read("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Sockets < before.Sockets+2 {
		t.Fatalf("sockets %d after opening two, %d before", opened.Sockets, before.Sockets)
	}
	if opened.UDPDrops != before.UDPDrops {
		t.Fatalf("drops moved from %d to %d before any datagram", before.UDPDrops, opened.UDPDrops)
	}
	flood(2000)
	flooded, err := procstat.Read("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if flooded.UDPDrops-opened.UDPDrops < 100 {
		t.Fatalf("drops %d -> %d after flooding 2000 datagrams at a tiny buffer, want at least 100", opened.UDPDrops, flooded.UDPDrops)
	}
	t.Logf("CPU %v -> %v spinning; sockets %d -> %d opening two; socket drops %d -> %d and RcvbufErrors %d -> %d flooding 2000 datagrams; RSS %d KiB",
		before.CPU, after.CPU, before.Sockets, opened.Sockets, opened.UDPDrops, flooded.UDPDrops, opened.RcvbufErrors(), flooded.RcvbufErrors(), flooded.RSS>>10)
	if flooded.RcvbufErrors()-opened.RcvbufErrors() < flooded.UDPDrops-opened.UDPDrops {
		t.Fatalf("RcvbufErrors %d -> %d, less than the socket's %d drops", opened.RcvbufErrors(), flooded.RcvbufErrors(), flooded.UDPDrops-opened.UDPDrops)
	}
}

// TestScriptReadsTheSameFigures: the shell script run as a box would run
// it over SSH, fed to the same parser, reads what Read reads.
func TestScriptReadsTheSameFigures(t *testing.T) {
	linux(t)
	_, flood := tinyUDP(t)
	flood(500)
	pid := os.Getpid()
	out, err := exec.Command("bash", "-c", "pid="+strconv.Itoa(pid)+"\n"+procstat.Script("$pid")).Output()
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	local, err := procstat.Read("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	f := procstat.Files{}
	for line := range strings.SplitSeq(string(out), "\n") {
		if line != "" && !f.Add(line) {
			t.Fatalf("script printed %q", line)
		}
	}
	remote, err := procstat.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if remote.Sockets != local.Sockets || remote.UDPDrops != local.UDPDrops || remote.UDPDrops == 0 {
		t.Errorf("script: %d sockets, %d drops; Read: %d sockets, %d drops", remote.Sockets, remote.UDPDrops, local.Sockets, local.UDPDrops)
	}
	if remote.CPU <= 0 || remote.CPU > local.CPU || remote.RSS <= 0 || remote.RcvbufErrors() > local.RcvbufErrors() || remote.RcvbufErrors() < 0 {
		t.Errorf("script: %+v; Read after it: %+v", remote, local)
	}
}

func TestParse(t *testing.T) {
	stat := "4242 (relay (x) y) S 1 2 3 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 12 0 100 1000 200 18446744073709551615\n"
	cpu, err := procstat.ParseStat(stat)
	if err != nil || cpu != 4*time.Second {
		t.Fatalf("ParseStat = %v, %v; want 4s (400 ticks)", cpu, err)
	}
	rss, err := procstat.ParseRSS("Name:\trelay\nVmRSS:\t   2048 kB\n")
	if err != nil || rss != 2<<20 {
		t.Fatalf("ParseRSS = %d, %v", rss, err)
	}
	snmp := "Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 10 1 7 20 5 2\nUdpLite: InDatagrams\nUdpLite: 0\n"
	u, err := procstat.ParseSNMP(snmp)
	if err != nil || u["RcvbufErrors"] != 5 || u["SndbufErrors"] != 2 || len(u) != 6 {
		t.Fatalf("ParseSNMP = %v, %v", u, err)
	}
	udp := "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n" +
		"  1: 0100007F:115B 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 555 2 0000000000000000 17\n" +
		"  2: 0100007F:115C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 556 2 0000000000000000 9\n"
	f := procstat.Files{procstat.FileStat: stat, procstat.FileUDP: udp, procstat.FileFD: "555\n777\n", procstat.FileSNMP: snmp}
	s, err := procstat.Parse(f)
	if err != nil || s.Sockets != 2 || s.UDPDrops != 17 || s.RcvbufErrors() != 5 {
		t.Fatalf("Parse = %+v, %v; want 2 sockets, the 17 drops of inode 555 and RcvbufErrors 5", s, err)
	}
	if n, ok, err := procstat.SocketDrops(udp, "556"); n != 9 || !ok || err != nil {
		t.Fatalf("SocketDrops(556) = %d, %v, %v; want 9", n, ok, err)
	}
	if _, ok, err := procstat.SocketDrops(udp, "777"); ok || err != nil {
		t.Fatalf("SocketDrops(777) found %v, %v; it has no line", ok, err)
	}
	if (procstat.Sample{}).RcvbufErrors() != -1 {
		t.Fatal("RcvbufErrors of an unknown sample is not -1")
	}
	for name, bad := range map[string]procstat.Files{
		"no stat":        {},
		"short stat":     {procstat.FileStat: "1 (x) S 1 2"},
		"no comm":        {procstat.FileStat: "1 x S"},
		"bad rss":        {procstat.FileStat: stat, procstat.FileStatus: "VmRSS: lots kB\n"},
		"bad snmp":       {procstat.FileStat: stat, procstat.FileSNMP: "Udp: A B\nUdp: 1\n"},
		"no udp in snmp": {procstat.FileStat: stat, procstat.FileSNMP: "Ip: 1\n"},
		"bad drops":      {procstat.FileStat: stat, procstat.FileFD: "555\n", procstat.FileUDP: strings.Replace(udp, " 17\n", " x\n", 1)},
	} {
		if _, err := procstat.Parse(bad); err == nil || !strings.HasPrefix(err.Error(), "procstat: ") {
			t.Errorf("%s: Parse = %v, want a procstat: error", name, err)
		}
	}
}
