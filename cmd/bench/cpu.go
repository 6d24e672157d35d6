package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU per grab, per process. On a box where the load generator, Redis, Kafka and the
// gateway share the cores, the closed-loop maximum is set by the CPU they all spend per
// grab, and that figure moves much less with other load on the machine than throughput or
// latency do: it is what a change to the grab path is judged by. The gateway step reads
// each process's utime+stime (/proc/<pid>/stat) around its closed-loop windows and divides
// by the requests answered.

// cpuProc is one process whose CPU the gateway step accounts for.
type cpuProc struct {
	name string // extra key suffix: cpu_us_per_grab_<name>
	pids []int
}

// cpuComponents are the processes in the order the report lists them.
var cpuComponents = []string{"gateway", "generator", "redis", "kafka"}

// cpuProcs names the gateway, this process (the load generator) and the servers listening
// on redisAddr and kafkaAddrs. A server whose process cannot be found (it runs in a
// container, or as another user) is left out and said so in the log: its row is then not
// measured, never a zero.
func (b *bench) cpuProcs(gateway int, redisAddr string, kafkaAddrs []string) []cpuProc {
	out := []cpuProc{{"gateway", []int{gateway}}, {"generator", []int{os.Getpid()}}}
	for _, s := range []struct {
		name  string
		addrs []string
	}{{"redis", []string{redisAddr}}, {"kafka", kafkaAddrs}} {
		pids, err := listeners(s.addrs)
		if err != nil || len(pids) == 0 {
			b.logf("  CPU per grab of %s not measured: no process found listening on %v (%v)", s.name, s.addrs, err)
			continue
		}
		out = append(out, cpuProc{s.name, pids})
	}
	return out
}

// cpuTimes reads every process's CPU time so far.
func cpuTimes(ps []cpuProc) ([]time.Duration, error) {
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		for _, pid := range p.pids {
			st, err := readProc(pid)
			if err != nil {
				return nil, fmt.Errorf("CPU time of %s: %w", p.name, err)
			}
			out[i] += st.cpu
		}
	}
	return out, nil
}

// cpuPerGrab turns two readings into µs of CPU per answered request, by extra key
// (cpu_us_per_grab_<name>, and _total over the processes measured).
func cpuPerGrab(ps []cpuProc, before, after []time.Duration, answered int) map[string]float64 {
	out := map[string]float64{}
	total := 0.0
	for i, p := range ps {
		us := float64((after[i] - before[i]).Microseconds()) / float64(max(1, answered))
		out["cpu_us_per_grab_"+p.name] = us
		total += us
	}
	out["cpu_us_per_grab_total"] = total
	return out
}

// cpuLine is the per-process figures for the log.
func cpuLine(m map[string]float64) string { return cpuLineOf(m, append(cpuComponents, "total")) }

// cpuLineOf is cpuLine for the processes named kinds, in that order.
func cpuLineOf(m map[string]float64, kinds []string) string {
	var parts []string
	for _, name := range kinds {
		if v, ok := m["cpu_us_per_grab_"+name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, v))
		}
	}
	return "CPU µs/grab: " + strings.Join(parts, ", ")
}

// listeners returns the processes holding a listening TCP socket on the ports of addrs
// (any local address: the stack listens on loopback).
func listeners(addrs []string) ([]int, error) {
	ports := map[string]bool{}
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		ports[fmt.Sprintf("%04X", n)] = true
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := listenInodes(f, ports, inodes); err != nil {
			return nil, err
		}
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	fds, err := filepath.Glob("/proc/[0-9]*/fd/*")
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var pids []int
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue // the process or fd went away, or is not ours to read
		}
		if !inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err == nil && !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// listenInodes adds the socket inodes of file's (/proc/net/tcp format) listening sockets on
// ports (upper-case hex) to inodes.
func listenInodes(file string, ports, inodes map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // no IPv6
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[3] != "0A" { // 0A: TCP_LISTEN
			continue
		}
		if i := strings.LastIndexByte(fs[1], ':'); i >= 0 && ports[fs[1][i+1:]] {
			inodes[fs[9]] = true
		}
	}
	return sc.Err()
}

// cpuSection is the report's table of CPU per grab at the gateway's closed-loop maximum;
// empty when the gateway step did not run.
func (r report) cpuSection() string {
	x := r.find(keyGatewayMax)
	if x == nil {
		return ""
	}
	if _, ok := x.Extra["cpu_us_per_grab_total"]; !ok {
		return "" // a results file from before the bench measured it
	}
	var b strings.Builder
	b.WriteString("\n## Gateway: CPU per grab\n\n" +
		"CPU time (utime + stime from /proc/<pid>/stat) each process spent during the closed-loop window that set the " +
		"maximum, divided by the requests answered in it. All processes share the same cores, so the total bounds the " +
		"rate this machine can serve; a process not found (in a container, another user's) is not listed. Redis and Kafka " +
		"count whatever else they served in the window: on a machine where other work uses them the figures are high.\n\n" +
		"| process | CPU µs per grab |\n|---|---:|\n")
	for _, name := range append(cpuComponents, "total") {
		if v, ok := x.Extra["cpu_us_per_grab_"+name]; ok {
			label := name
			switch name {
			case "generator":
				label = "load generator (the bench itself)"
			case "redis":
				label = "Redis"
			case "kafka":
				label = "Kafka broker(s)"
			case "total":
				label = "**total**"
			}
			fmt.Fprintf(&b, "| %s | %s |\n", label, spr(v))
		}
	}
	return b.String()
}
