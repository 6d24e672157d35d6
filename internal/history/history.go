// Package history records what the clients of a chaos row asked the pipeline and what they
// were told: every grab attempt, status read, downstream feedback and deliberate stock
// change, each with its client, its invocation and return times on one monotonic axis, its
// input and its answer (a transport error or a timeout is an answer too: "unknown"). The
// recording is written as JSON lines, a header with the row's seed and the sale's shape
// first, so a history can be kept from every run, read by people, and checked again offline
// (internal/linearcheck).
package history

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind names what an operation was.
type Kind string

const (
	// Grab is one attempt of POST …/grab: User, Prize, Key and RID (the request id the key
	// names for that user) in; Code and Out (the status of a 202, the error code otherwise)
	// out.
	Grab Kind = "grab"
	// Status is one attempt of GET /api/v1/grabs/{RID}: Code and Out (the status of a 200,
	// with the reason after a slash when there is one; the error code otherwise).
	Status Kind = "status"
	// Feedback is a downstream report written to the feedback topic: RID in, Out the kind
	// ("paid", "cancelled/<reason>"); Code 1 when Kafka acknowledged it, 0 when not (Err).
	Feedback Kind = "feedback"
	// Stock is a change of a prize's stock in Redis the row made on purpose (Units, signed),
	// as an operator's or a fault's write: it took effect between Call and Return.
	Stock Kind = "stock"
	// Returned is the server's own record of units that came back into a prize's Redis stock
	// (Out "return": a cancelled order's unit put back for resale; "correction": the
	// reconciler's drift correction, Units signed). Read from MySQL after the row: the unit
	// was back no later than Return, and Call is Return.
	Returned Kind = "returned"
	// Fault spans the row's fault injection (Out names it), for whoever reads the history.
	Fault Kind = "fault"
)

// Op is one operation of a history. Times are nanoseconds since the recorder started.
type Op struct {
	Client int    `json:"c"`
	Kind   Kind   `json:"k"`
	User   string `json:"u,omitempty"`
	Prize  int64  `json:"p,omitempty"`
	Key    string `json:"key,omitempty"`
	RID    string `json:"rid,omitempty"`
	Call   int64  `json:"call"`
	Return int64  `json:"ret"`
	Code   int    `json:"code"` // HTTP status; 0: no answer (Err says why)
	Out    string `json:"out,omitempty"`
	Err    string `json:"err,omitempty"`
	Units  int    `json:"units,omitempty"`
}

// Prize is one prize of the sale, as the checker needs it.
type Prize struct {
	ID    int64 `json:"id"`
	Total int   `json:"total"` // units at preheat, over every bucket
	// Stale is how old the view of the stock a sold_out answer is decided from may be: 0
	// for a prize without buckets (the admission script decides), the gateways' cache of
	// every bucket's stock for a prize with buckets.
	Stale time.Duration `json:"stale,omitempty"`
}

// Header opens a history: which row, which seed, and the sale's rules.
type Header struct {
	Row   string    `json:"row"`
	Seed  uint64    `json:"seed"`
	Start time.Time `json:"start"` // wall time of the recorder's zero
	// Limit is the activity's per-user limit per prize.
	Limit int `json:"limit"`
	// RegrabAfterCancel says a cancelled order gives its buyer's slot back.
	RegrabAfterCancel bool `json:"regrab_after_cancel,omitempty"`
	// RedisMayForget says the row's fault can make Redis forget writes it acknowledged
	// (a restart from its append-only file, a failover, a flush, keys deleted): Redis may
	// then admit beyond the stock, and the database's refusal of those grabs (rejected,
	// sold_out) is the design's last guard, not a violation.
	RedisMayForget bool    `json:"redis_may_forget,omitempty"`
	Prizes         []Prize `json:"prizes"`
}

// Recorder collects the operations of one row from many goroutines. A nil *Recorder records
// nothing, so code that fires a crowd without a history needs no branch.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder starts a recorder; its clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the time on the recorder's axis (monotonic).
func (r *Recorder) Now() int64 {
	if r == nil {
		return 0
	}
	return int64(time.Since(r.start))
}

// At places a wall-clock time (a server's stamp read back from MySQL) on the recorder's axis.
func (r *Recorder) At(t time.Time) int64 {
	if r == nil {
		return 0
	}
	return int64(t.Round(0).Sub(r.start.Round(0)))
}

// Start is the wall time of the recorder's zero.
func (r *Recorder) Start() time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.start.Round(0)
}

// Add records one operation.
func (r *Recorder) Add(op Op) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of what was recorded, ordered by invocation time.
func (r *Recorder) Ops() []Op {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := slices.Clone(r.ops)
	r.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Op) int { return cmpInt64(a.Call, b.Call) })
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Write writes a history as JSON lines: the header, then one operation a line.
func Write(w io.Writer, h Header, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("history header: %w", err)
	}
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			return fmt.Errorf("history op %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// Read reads what Write wrote.
func Read(r io.Reader) (Header, []Op, error) {
	var h Header
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return h, nil, fmt.Errorf("history header: %w", err)
		}
		return h, nil, errors.New("history: empty")
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
		return h, nil, fmt.Errorf("history header: %w", err)
	}
	var ops []Op
	for line := 2; sc.Scan(); line++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return h, nil, fmt.Errorf("history line %d: %w", line, err)
		}
		ops = append(ops, op)
	}
	if err := sc.Err(); err != nil {
		return h, nil, fmt.Errorf("history: %w", err)
	}
	return h, ops, nil
}

// WriteFile writes a history to path, gzipped when the name ends in .gz.
func WriteFile(path string, h Header, ops []Op) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("history: %w", cerr)
		}
	}()
	if !strings.HasSuffix(path, ".gz") {
		return Write(f, h, ops)
	}
	zw := gzip.NewWriter(f)
	if err := Write(zw, h, ops); err != nil {
		return err
	}
	return zw.Close()
}

// ReadFile reads a history written by WriteFile.
func ReadFile(path string) (Header, []Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return Header{}, nil, fmt.Errorf("history %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return Read(r)
}
