package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/load"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
)

// concurrency is the closed-loop client count of rows that do not sweep it.
const concurrency = 256

type bench struct {
	out    io.Writer
	quick  bool
	binlog bool // persistence also with the binary log and sync_binlog=1
	reps   int
	only   map[string]bool // steps to run (empty = all)
	bin    string
	client *http.Client

	// One JWT secret for the whole run, given to every gateway and the strategy server, so
	// the tokens are signed once, before any measurement, and reused by every repetition
	// (each repetition has a fresh session, so the same users grab afresh).
	secret string
	signer *auth.Signer
	es256  *es256Tokens // the production path's tokens, for the ES256 ceiling
	signed []string

	binlogOn bool // MariaDB currently runs with the binary log (persistence.go)

	// cluster: the cluster profile (SECKILL_CLUSTER=1), whose steps are clusterSteps.
	cluster bool

	// Settings to try (kafkatune.go): added to the gateways' environment, and set on the
	// brokers as cluster-wide dynamic configs for the gateway and salecurve steps.
	gatewayEnv  map[string]string
	kafkaConfig map[string]string

	// The baseline of -compare (compare.go); nil without it.
	base *variant
	// side names the variant a step runs as in file names: "" for this tree, "-baseline"
	// while the baseline runs (compare.go).
	side string

	// profileDir, with -profile, is where the gateway step writes its CPU profiles
	// (profile.go); "" = no profile.
	profileDir string

	// The open step (open.go): vegeta's path once built (vegeta.go), its connections
	// (-open-connections), and -pin-generator (vegeta under taskset -c 1).
	vegeta       string
	openConns    int
	pinGenerator bool
}

// step is one question the bench answers; it runs once per repetition.
type step struct {
	name string
	run  func(ctx context.Context, rep int) ([]measured, error)
}

func (b *bench) steps() []step {
	if b.cluster {
		return b.clusterSteps()
	}
	return []step{
		{"ceilings", b.ceilings},
		{"gateway", b.gateway},
		{"salecurve", b.saleCurve},
		{"strategies", b.strategies},
		{"persistence", b.persistence},
		{"sale", b.sale},
		{"buckets", b.buckets},
		{"open", b.saleOpen},
	}
}

// clusterSteps are the steps that run on the cluster profile with -only (without it, the
// profile's own table, cluster.go).
func (b *bench) clusterSteps() []step {
	return []step{{"buckets", b.clusterBuckets}}
}

func stepNames(steps []step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.name)
	}
	return out
}

// parseOnly checks -only against the step names.
func parseOnly(only string, steps []step) (map[string]bool, error) {
	sel := map[string]bool{}
	if only == "" {
		return sel, nil
	}
	known := stepNames(steps)
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		if !strings.Contains(","+strings.Join(known, ",")+",", ","+name+",") {
			return nil, fmt.Errorf("-only: unknown step %q (steps: %s)", name, strings.Join(known, ","))
		}
		sel[name] = true
	}
	return sel, nil
}

func newBench(out io.Writer, quick, binlog bool, reps int) (*bench, error) {
	bin, err := os.MkdirTemp("", "seckill-bench-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "building the deployables")
	if err := harness.Build(bin); err != nil {
		return nil, err
	}
	hot := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/hotrow")
	hot.Dir = harness.Root()
	if o, err := hot.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build hotrow: %v\n%s", err, o)
	}
	raw := make([]byte, 32)
	if _, err := crand.Read(raw); err != nil {
		return nil, err
	}
	secret := hex.EncodeToString(raw)
	es256, err := newES256Tokens(bin)
	if err != nil {
		return nil, err
	}
	return &bench{out: out, quick: quick, binlog: binlog, reps: reps, bin: bin, secret: secret, es256: es256, openConns: openDefaultConnections,
		signer: auth.NewSigner([]byte(secret), "seckill", "seckill-gateway"),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048}}}, nil
}

func (b *bench) close() {
	os.RemoveAll(b.bin)
	if b.base != nil && b.base.bin != b.bin {
		os.RemoveAll(b.base.bin)
	}
}

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.out, format+"\n", args...) }

// n scales request counts down for -quick.
func (b *bench) n(full int) int {
	if b.quick {
		return max(full/10, 500)
	}
	return full
}

// tokens returns user i's token for i < n, signing the missing ones now (call it between
// measured windows: signing costs the generator CPU).
func (b *bench) tokens(n int) (func(i int) string, error) {
	for i := len(b.signed); i < n; i++ {
		t, err := b.signer.Token("bench-"+strconv.Itoa(i), time.Now(), 2*time.Hour)
		if err != nil {
			return nil, fmt.Errorf("sign a bench token: %w", err)
		}
		b.signed = append(b.signed, t)
	}
	signed := b.signed
	return func(i int) string { return signed[i%len(signed)] }, nil
}

// all runs the selected steps, interleaved (runInterleaved), and leaves MariaDB as the
// stack configures it, also after a failure.
func (b *bench) all(ctx context.Context, rep *report) (err error) {
	var steps []step
	for _, s := range b.steps() {
		if len(b.only) == 0 || b.only[s.name] {
			steps = append(steps, b.paired(s))
		}
	}
	defer func() {
		if rerr := b.restoreMariaDB(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return runInterleaved(ctx, steps, b.reps, b.logf, rep)
}

// runInterleaved runs every step once per repetition: repetition 1 of every step, then
// repetition 2 of every step, and so on. Ratios are derived within each repetition. On an
// error rep keeps the repetitions finished before it (rep.Reps counts them).
func runInterleaved(ctx context.Context, steps []step, reps int, logf func(string, ...any), rep *report) error {
	rep.Order = interleave(stepNames(steps), reps)
	var col collector
	done := 0
	defer func() { rep.Rows, rep.Reps = col.summarise(), done }()
	for r := 1; r <= reps; r++ {
		got := map[string]*sample{}
		var ms []measured
		for _, s := range steps {
			logf("== repetition %d of %d: %s", r, reps, s.name)
			m, err := s.run(ctx, r)
			if err != nil {
				// A step that measured and then found an invariant broken returns both:
				// its rows stay in the report (with the repetitions finished before) so
				// the figure that failed the run is there to read.
				if len(m) > 0 {
					col.add(r, m)
				}
				return fmt.Errorf("repetition %d, %s: %w", r, s.name, err)
			}
			for _, x := range m {
				got[x.key] = x.s
			}
			ms = append(ms, m...)
		}
		deriveRatios(got)
		deriveBaseRatios(got) // -compare's baseline rows, if any
		col.add(r, ms)
		done = r
	}
	return nil
}

func machine(ctx context.Context) map[string]string {
	run := func(name string, args ...string) string {
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(out))
	}
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return map[string]string{
		"cores":   strconv.Itoa(runtime.NumCPU()),
		"cpu":     model,
		"memory":  run("sh", "-c", "free -h | awk '/Mem:/{print $2}'"),
		"os":      run("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
		"go":      runtime.Version(),
		"redis":   run("redis-server", "--version"),
		"mariadb": run("mariadbd", "--version"),
		"kafka":   "Apache Kafka 4.4.0 (KRaft, single broker)",
		"commit":  run("git", "-C", harness.Root(), "rev-parse", "--short", "HEAD"),
		"date":    time.Now().UTC().Format(time.RFC3339),
		"note":    "load generator, servers and services share the same cores, loopback only",
	}
}

func sampleFrom(s load.Summary) *sample {
	return &sample{ThroughputPS: s.ThroughputPS, P50ms: s.P50ms, P99ms: s.P99ms, P999ms: s.P999ms,
		Extra: map[string]any{"requests": s.Requests, "errors": s.Errors, "codes": s.Codes, "mode": s.Mode}}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// httpGrab returns a load.Request posting to url(i) with user i's token and key i.
func (b *bench) httpGrab(url func(i int) string, token func(i int) string, keyPrefix string) load.Request {
	return func(ctx context.Context, i int) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url(i), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+token(i))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%08d", keyPrefix, i))
		resp, err := b.client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
}

type procStat struct {
	cpu time.Duration
	hwm int64 // peak RSS, bytes
}

// readProc reads a process's CPU time and peak RSS (VmHWM); both feed reported figures,
// so a value that cannot be read is an error, never a zero.
func readProc(pid int) (procStat, error) {
	var st procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the command name (which may hold spaces) start after ") ".
	f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
	if len(f) <= 12 {
		return st, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	st.cpu = time.Duration(ut+stt) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil {
		return st, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return st, fmt.Errorf("/proc/%d/status VmHWM: %w", pid, err)
			}
			st.hwm = kb << 10
			return st, nil
		}
	}
	return st, fmt.Errorf("/proc/%d/status: no VmHWM line", pid)
}

func peakRSSMB(pid int) (float64, error) {
	st, err := readProc(pid)
	return float64(st.hwm) / (1 << 20), err
}

// startStrategyServer starts `bench -serve strategies`; without a dsn it serves only the
// ceilings (/trivial, /jwt).
func (b *bench) startStrategyServer(ctx context.Context, dsn string) (*harness.Proc, string, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	p, err := harness.Start("strategies", self, map[string]string{"SECKILL_JWT_SECRET": b.secret, "SECKILL_BENCH_JWKS_FILE": b.es256.jwks},
		"-serve", "strategies", "-addr", addr, "-dsn", dsn, "-redis", envOr("SECKILL_REDIS_ADDR", config.DefaultRedisAddr))
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := waitHTTP(ctx, p, base+"/healthz", 20*time.Second); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, base, nil
}

// waitHTTP polls url until it answers 200, p exits, or d passes.
func waitHTTP(ctx context.Context, p *harness.Proc, url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s:\n%s", p.Name, url, p.Output())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pause lets queues drain between measured windows.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
