package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-pipeline/seckill/internal/harness"
)

// The open step's load generator is vegeta (a tool dependency of this module: go.mod's
// tool line pins v12.13.0), run as a process of its own so its CPU and the servers' are
// told apart, and so the crowd is a real open loop: vegeta sends at the rate whatever the
// answers do, from fresh connections (no pre-warm), keep-alive on as browsers keep it.
// Its results file is decoded with vegeta's own library and reduced to answers.

// buildVegeta builds vegeta once per bench run (from this module, at go.mod's version)
// and returns its path.
func (b *bench) buildVegeta() (string, error) {
	if b.vegeta != "" {
		return b.vegeta, nil
	}
	path := filepath.Join(b.bin, "vegeta")
	cmd := exec.Command("go", "build", "-o", path, "github.com/tsenart/vegeta/v12")
	cmd.Dir = harness.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build vegeta: %v\n%s", err, out)
	}
	b.vegeta = path
	return path, nil
}

// attackSpec is one vegeta run.
type attackSpec struct {
	rate     int // requests per second
	duration time.Duration
	conns    int // -connections and -max-connections
	url      string
	tokens   func(i int) string // user i's bearer token, one user per request
	// keyPrefix, when set, gives request i the Idempotency-Key keyPrefix-i (fresh keys).
	keyPrefix string
	// startAt is when the attack starts (the targets are held back until then); zero: now.
	startAt time.Time
	procs   []cpuProc // CPU read when the attack starts (the caller reads it after)
	rssPid  int       // the server whose peak RSS is reset at the start and read at the end
	pin     bool      // vegeta under taskset -c 1
}

// targets is how many targets a spec needs so none repeats: vegeta sends at most
// rate × duration (+1) requests and cycles through its targets.
func (s attackSpec) targets() int {
	n := float64(s.rate) * s.duration.Seconds()
	return int(n) + int(n/100) + 100
}

// attackResult is what one vegeta run measured.
type attackResult struct {
	answers   []hit
	targets   int
	generator time.Duration   // vegeta's user+sys CPU during the attack
	before    []time.Duration // spec.procs' CPU when the attack started
	peakRSSMB float64         // spec.rssPid's VmHWM over the attack
}

// targetLines is the JSON targets file: a POST to url with user i's token (and key i) per line.
func targetLines(s attackSpec) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range s.targets() {
		h := map[string][]string{"Authorization": {"Bearer " + s.tokens(i)}}
		if s.keyPrefix != "" {
			h["Idempotency-Key"] = []string{s.keyPrefix + "-" + strconv.Itoa(i)}
		}
		if err := enc.Encode(vegeta.Target{Method: "POST", URL: s.url, Header: h}); err != nil {
			return nil, fmt.Errorf("encode target %d: %w", i, err)
		}
	}
	return buf.Bytes(), nil
}

// attack runs vegeta for spec and decodes its results. vegeta reads every target before
// it starts (its targets are not read lazily, so reading costs it nothing during the
// attack): they are fed on its standard input, and the input is closed at spec.startAt, so
// the attack starts then, within milliseconds, however long the reading took.
func (b *bench) attack(ctx context.Context, spec attackSpec) (attackResult, error) {
	var res attackResult
	bin, err := b.buildVegeta()
	if err != nil {
		return res, err
	}
	lines, err := targetLines(spec)
	if err != nil {
		return res, err
	}
	res.targets = spec.targets()
	dir, err := os.MkdirTemp("", "seckill-vegeta-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "results.bin")
	args := []string{"attack", "-format=json", "-targets=stdin", "-output=" + out,
		"-rate=" + strconv.Itoa(spec.rate) + "/1s", "-duration=" + spec.duration.String(),
		"-connections=" + strconv.Itoa(spec.conns), "-max-connections=" + strconv.Itoa(spec.conns),
		"-keepalive=true", "-http2=false"}
	name := bin
	if spec.pin {
		name, args = "taskset", append([]string{"-c", "1", bin}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start vegeta: %w", err)
	}
	waited := false
	stop := func() { // an early return: end the run we started, and reap it
		if !waited {
			waited = true
			_ = stdin.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	defer stop()
	if _, err := stdin.Write(lines); err != nil {
		stop() // vegeta has exited or is ended: its stderr is complete
		return res, fmt.Errorf("feed vegeta its targets: %w (%s)", err, stderr.String())
	}
	if late := time.Since(spec.startAt); !spec.startAt.IsZero() && late > 0 {
		b.logf("  vegeta had read its targets %.0f ms after the attack was due", late.Seconds()*1000)
	}
	if err := pause(ctx, time.Until(spec.startAt)); err != nil {
		return res, err
	}
	started, err := b.attackStarts(cmd.Process.Pid, spec, &res)
	if cerr := stdin.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close vegeta's targets: %w", cerr)
	}
	if err != nil {
		return res, err
	}
	waited = true
	if err := cmd.Wait(); err != nil {
		return res, fmt.Errorf("vegeta: %w\n%s", err, stderr.String())
	}
	st := cmd.ProcessState
	res.generator = st.UserTime() + st.SystemTime() - started
	if spec.rssPid != 0 {
		if res.peakRSSMB, err = peakRSSMB(spec.rssPid); err != nil {
			return res, fmt.Errorf("peak RSS of pid %d: %w", spec.rssPid, err)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		return res, fmt.Errorf("vegeta's results: %w", err)
	}
	defer f.Close()
	res.answers, err = decodeHits(f)
	return res, err
}

// attackStarts takes the readings of the attack's start: the processes' CPU, the server's
// peak RSS reset, and the CPU vegeta spent reading its targets (returned, so the
// generator's figure is the attack's alone).
func (b *bench) attackStarts(vegetaPid int, spec attackSpec, res *attackResult) (time.Duration, error) {
	before, err := cpuTimes(spec.procs)
	if err != nil {
		return 0, err
	}
	res.before = before
	if spec.rssPid != 0 {
		if err := resetPeakRSS(spec.rssPid); err != nil {
			return 0, err
		}
	}
	// Under taskset the pid is vegeta's once taskset has exec'd it; before that the reading
	// is taskset's few milliseconds, which the figure then counts.
	st, err := readProc(vegetaPid)
	if err != nil {
		return 0, fmt.Errorf("CPU time of vegeta: %w", err)
	}
	return st.cpu, nil
}

// resetPeakRSS resets a process's VmHWM to its current RSS (clear_refs 5), so a later
// reading is the peak of what came after, not of the process's whole life.
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset the peak RSS of pid %d: %w", pid, err)
	}
	return nil
}

// hit is one vegeta result reduced to what the open step's figures need.
type hit struct {
	seq     uint64
	code    uint16 // 0: no HTTP answer
	kind    string // "202", "409 sold_out", "503 overloaded", ...; "" without an answer
	sent    time.Time
	latency time.Duration // from sent until the whole answer was read
	// transport is the error of a request that got no HTTP answer.
	transport  string
	retryAfter bool
	requestID  string // a 202's request_id
}

func (a hit) end() time.Time { return a.sent.Add(a.latency) }

// hitOf reduces one result. vegeta sets Error for every status outside 2xx–3xx too
// ("409 Conflict"); only a result without a status code is a transport error.
func hitOf(r *vegeta.Result) hit {
	a := hit{seq: r.Seq, code: r.Code, sent: r.Timestamp, latency: r.Latency}
	if r.Code == 0 {
		a.transport = cmp.Or(r.Error, "no answer")
		return a
	}
	a.retryAfter = r.Headers.Get("Retry-After") != ""
	var body struct {
		Error     string `json:"error"` // the API's error code (docs/api/openapi-public.yaml)
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	// A body that is not a JSON object (an HTML error page) leaves the kind at its status.
	_ = json.Unmarshal(r.Body, &body)
	a.kind = strconv.Itoa(int(r.Code))
	if c := cmp.Or(body.Error, body.Code); c != "" && r.Code >= 300 {
		a.kind += " " + c
	}
	if r.Code == 202 {
		a.requestID = body.RequestID
	}
	return a
}

// decodeHits reads a vegeta results file (gob, as vegeta attack writes it).
func decodeHits(r io.Reader) ([]hit, error) {
	dec := vegeta.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var out []hit
	for {
		var res vegeta.Result
		err := dec.Decode(&res)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode vegeta's result %d: %w", len(out)+1, err)
		}
		out = append(out, hitOf(&res))
	}
}

// processCPU turns a CPU reading before and after into seconds per process, by extra key
// (cpu_s_<name>).
func processCPU(ps []cpuProc, before, after []time.Duration) map[string]float64 {
	out := map[string]float64{}
	for i, p := range ps {
		out["cpu_s_"+p.name] = (after[i] - before[i]).Seconds()
	}
	return out
}
