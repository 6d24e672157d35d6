// Package linearcheck checks a recorded history of a sale (internal/history) against
// sequential models of it, so a chaos row is judged on every answer its buyers got along the
// way and not only on the state the pipeline ends in.
//
// A hot prize's history holds thousands of concurrent grabs, too many for a general search,
// so the history is split into checks that are each exact and fast:
//
//   - The buyer's model (Porcupine, one partition per user and prize; model.go): every grab
//     attempt and status read of one user's request ids for one prize must be linearizable
//     against registers that only move forward (queued → succeeded → cancelled, or queued →
//     rejected) with at most the per-user limit holding a slot. It catches a status that
//     regresses or contradicts an earlier answer (a 404 after a 202 included), a repeat of an
//     admitted key answered as a new grab, limit_reached below the limit, sold_out at the
//     limit, and a user admitted over the limit.
//   - The stock count, per prize (stock.go): a sold_out answer is wrong when the units that
//     existed (the stock, plus units that came back before the answer's view of the stock was
//     taken) exceed every admission that could precede it; and the units admitted (request
//     ids ever answered 202 or read) may not exceed the stock plus one unit per cancelled
//     grab and the drift corrections that raised Redis: a unit returned twice, or any other
//     over-admission, shows there.
//   - Readability: every grab answered 202 ends with a read of a final status.
//
// What none of them covers: unkeyed grabs (their request ids are the gateway's, so nothing
// ties attempts together), the order events and MySQL's rows (the chaos row's end-state
// checks do), whether a paid order was then cancelled, and the order in which buyers were
// admitted (fairness).
package linearcheck

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seckill-pipeline/seckill/internal/history"
)

// Class is a kind of violation.
type Class string

// The violation classes.
const (
	SoldOutEarly Class = "sold_out while units remained"
	Regressed    Class = "status regressed or contradicted an earlier answer"
	OverLimit    Class = "user over the per-user limit"
	Unreadable   Class = "202 never readable"
	OverAdmitted Class = "more units admitted than existed (a unit returned twice)"
	Undecided    Class = "check did not finish"
)

// Violation is one thing the history shows that the model forbids.
type Violation struct {
	Class  Class
	Prize  int64
	User   string
	Detail string
	Ops    []history.Op // the operations that show it: the partition, or the answer and its bound
}

func (v Violation) String() string {
	who := ""
	if v.User != "" {
		who = " user " + v.User
	}
	return fmt.Sprintf("%s (prize %d%s): %s", v.Class, v.Prize, who, v.Detail)
}

// Report is the outcome of checking one history.
type Report struct {
	Ops        int
	Partitions int
	Elapsed    time.Duration
	Violations []Violation

	header  history.Header
	illegal []partition // the buyer partitions Porcupine refused, in order
}

// Linearizable says whether every check passed.
func (r Report) Linearizable() bool { return len(r.Violations) == 0 }

// Count returns how many violations of a class the report holds.
func (r Report) Count(c Class) int {
	n := 0
	for _, v := range r.Violations {
		if v.Class == c {
			n++
		}
	}
	return n
}

// checkTimeout bounds Porcupine's search in one partition; a partition of one user's grabs
// of one prize is tens of operations, decided in microseconds.
const checkTimeout = 10 * time.Second

// Check runs every check over a history.
func Check(h history.Header, ops []history.Op) Report {
	start := time.Now()
	r := Report{Ops: len(ops), header: h}
	parts := partitions(ops)
	r.Partitions = len(parts)
	r.Violations = append(r.Violations, r.checkBuyers(h, parts)...)
	for _, p := range h.Prizes {
		r.Violations = append(r.Violations, checkStock(h, p, ops)...)
	}
	r.Violations = append(r.Violations, checkReadable(ops)...)
	r.Elapsed = time.Since(start)
	return r
}

// partition is one user's grabs and reads of one prize.
type partition struct {
	user  string
	prize int64
	ops   []history.Op
}

func partitions(ops []history.Op) []partition {
	type key struct {
		user  string
		prize int64
	}
	idx := map[key]int{}
	var out []partition
	for _, op := range ops {
		if (op.Kind != history.Grab && op.Kind != history.Status) || op.RID == "" || op.User == "" {
			continue
		}
		k := key{op.User, op.Prize}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, partition{user: op.User, prize: op.Prize})
		}
		out[i].ops = append(out[i].ops, op)
	}
	return out
}

// operations turns a partition into Porcupine's operations: request ids become slots, clients
// are numbered from 0 (the visualization draws one line a client), and a grab whose outcome is
// unknown may take effect at any time after its call, so it returns at the end of time.
func (p partition) operations() []porcupine.Operation {
	slots := map[string]int{}
	clients := map[int]int{}
	out := make([]porcupine.Operation, 0, len(p.ops))
	for _, op := range p.ops {
		slot, ok := slots[op.RID]
		if !ok {
			slot = len(slots)
			slots[op.RID] = slot
		}
		client, ok := clients[op.Client]
		if !ok {
			client = len(clients)
			clients[op.Client] = client
		}
		o := classify(op)
		ret := op.Return
		if op.Kind == history.Grab && o.what == unknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: client, Input: input{read: op.Kind == history.Status, slot: slot, rid: op.RID},
			Call: op.Call, Output: o, Return: ret})
	}
	return out
}

func (r *Report) checkBuyers(h history.Header, parts []partition) []Violation {
	rl := rules{limit: max(h.Limit, 1), regrab: h.RegrabAfterCancel}
	model := buyerModel(rl)
	verdicts := make([]porcupine.CheckResult, len(parts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				verdicts[i] = porcupine.CheckOperationsTimeout(model, parts[i].operations(), checkTimeout)
			}
		}()
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()

	// Which class a refused partition shows: with the slots unchecked, a partition that passes
	// was refused for its slots; one that still fails shows a status that went back or a
	// grab answered against its register.
	unlimited := buyerModel(rules{limit: rl.limit, regrab: true, anyLimit: true})
	var out []Violation
	for i, v := range verdicts {
		p := parts[i]
		switch v {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			out = append(out, Violation{Class: Undecided, Prize: p.prize, User: p.user, Ops: p.ops,
				Detail: fmt.Sprintf("Porcupine did not decide %d operations in %s", len(p.ops), checkTimeout)})
			continue
		}
		r.illegal = append(r.illegal, p)
		class, detail := Regressed, "the answers fit no order of the grabs and reads"
		if porcupine.CheckOperations(unlimited, p.operations()) {
			class, detail = OverLimit, fmt.Sprintf("the answers disagree with a limit of %d slot(s) per user", rl.limit)
		} else if rid, ok := notFoundAfterAccepted(p.ops); ok {
			class, detail = Unreadable, "status of "+rid+" read 404 after its 202"
		}
		out = append(out, Violation{Class: class, Prize: p.prize, User: p.user, Ops: p.ops, Detail: detail})
	}
	return out
}

// notFoundAfterAccepted finds a request id read as 404 after a 202 for it had returned.
func notFoundAfterAccepted(ops []history.Op) (string, bool) {
	accepted := map[string]int64{}
	for _, op := range ops {
		if op.Kind == history.Grab && op.Code == 202 {
			if t, ok := accepted[op.RID]; !ok || op.Return < t {
				accepted[op.RID] = op.Return
			}
		}
	}
	for _, op := range ops {
		if t, ok := accepted[op.RID]; ok && op.Kind == history.Status && op.Code == 404 && op.Call > t {
			return op.RID, true
		}
	}
	return "", false
}

// checkReadable: every request id answered 202 has, as its last read, a final status.
func checkReadable(ops []history.Op) []Violation {
	type grab struct {
		op   history.Op
		last *history.Op
	}
	grabs := map[string]*grab{}
	for _, op := range ops {
		if op.Kind == history.Grab && op.Code == 202 && op.RID != "" {
			if _, ok := grabs[op.RID]; !ok {
				grabs[op.RID] = &grab{op: op}
			}
		}
	}
	for i := range ops {
		op := &ops[i]
		if g, ok := grabs[op.RID]; ok && op.Kind == history.Status && (g.last == nil || op.Return > g.last.Return) {
			g.last = op
		}
	}
	var out []Violation
	for _, rid := range slices.Sorted(maps.Keys(grabs)) {
		g := grabs[rid]
		why := ""
		switch {
		case g.last == nil:
			why = "never read"
		case g.last.Code != 200:
			why = fmt.Sprintf("last read answered %d %s%s", g.last.Code, g.last.Out, g.last.Err)
		default:
			if o := classify(*g.last); o.phase == queued {
				why = "last read still queued"
			}
		}
		if why != "" {
			shown := []history.Op{g.op}
			if g.last != nil {
				shown = append(shown, *g.last)
			}
			out = append(out, Violation{Class: Unreadable, Prize: g.op.Prize, User: g.op.User, Ops: shown, Detail: rid + ": " + why})
		}
	}
	return out
}

// sortedTimes sorts and returns ts (for counting with sort.Search).
func sortedTimes(ts []int64) []int64 {
	slices.Sort(ts)
	return ts
}

// atMost counts the times in sorted ts that are ≤ t.
func atMost(ts []int64, t int64) int {
	return sort.Search(len(ts), func(i int) bool { return ts[i] > t })
}

// WriteHTML writes Porcupine's visualization of the first buyer partition it refused (the
// operations of one user and prize on a time line, and the longest order of them the model
// accepts) to path. It reports false when no partition was refused.
func (r Report) WriteHTML(path string) (bool, error) {
	if len(r.illegal) == 0 {
		return false, nil
	}
	model := buyerModel(rules{limit: max(r.header.Limit, 1), regrab: r.header.RegrabAfterCancel})
	_, info := porcupine.CheckOperationsVerbose(model, r.illegal[0].operations(), checkTimeout)
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return false, fmt.Errorf("visualize: %w", err)
	}
	return true, nil
}

// Describe writes one line per operation of a violation, for a failure message.
func Describe(op history.Op) string {
	ret := time.Duration(op.Return).String()
	if op.Return == math.MaxInt64 {
		ret = "∞"
	}
	what := fmt.Sprintf("%s %s", op.Kind, op.RID)
	if op.Kind == history.Stock || op.Kind == history.Returned {
		what = fmt.Sprintf("%s %+d %s", op.Kind, op.Units, op.Out)
	}
	ans := fmt.Sprintf("%d %s", op.Code, op.Out)
	if op.Code == 0 && op.Kind != history.Stock && op.Kind != history.Returned {
		ans = "no answer " + op.Err
	}
	return fmt.Sprintf("[%s, %s] client %d %s → %s", time.Duration(op.Call), ret, op.Client, what, ans)
}
