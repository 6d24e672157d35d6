package linearcheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/seckill-pipeline/seckill/internal/history"
)

// checkStock counts one prize's units against its answers (see the package comment).
//
// A sold_out answer invoked at s and returned at t was decided from a view of the stock
// taken at some v in [s − Stale, t]. The units in Redis at v were at least
//
//	Total + units back no later than s − Stale − admissions invoked no later than t − units taken out on purpose
//
// counting as an admission every request id with an attempt answered 202 or left without a
// verdict (the earliest such attempt), as back every unit the row put in on purpose and
// every unit the server recorded putting back (stamped after the fact), and every unit taken
// out on purpose or by a correction whatever its time. When that bound is above zero, units
// remained whatever the order of events: the answer is wrong.
func checkStock(h history.Header, p history.Prize, ops []history.Op) []Violation {
	first := map[string]int64{} // request id → earliest attempt that may have admitted it
	admitted := map[string]bool{}
	cancelledRIDs := map[string]bool{}
	dbRefused := map[string]bool{} // rejected by the database for want of stock
	seen := func(rid string, o output, op history.Op) {
		admitted[rid] = true
		switch {
		case o.phase == cancelled:
			cancelledRIDs[rid] = true
		case op.Out == "rejected/sold_out":
			dbRefused[rid] = true
		}
	}
	var back []int64
	var backUnits []int
	var soldOuts []history.Op
	down, raised := 0, 0
	for _, op := range ops {
		if op.Prize != p.ID {
			continue
		}
		switch op.Kind {
		case history.Grab:
			o := classify(op)
			if o.what == soldOut {
				soldOuts = append(soldOuts, op)
			}
			if o.what == hasStatus || o.what == unknown {
				if t, ok := first[op.RID]; !ok || op.Call < t {
					first[op.RID] = op.Call
				}
			}
			if o.what == hasStatus {
				seen(op.RID, o, op)
			}
		case history.Status:
			if o := classify(op); o.what == hasStatus {
				seen(op.RID, o, op)
			}
		case history.Stock, history.Returned:
			if op.Units < 0 {
				down -= op.Units
				continue
			}
			back, backUnits = append(back, op.Return), append(backUnits, op.Units)
			if op.Kind == history.Stock || op.Out == "correction" {
				raised += op.Units
			}
		}
	}
	var out []Violation
	calls := make([]int64, 0, len(first))
	for _, c := range first {
		calls = append(calls, c)
	}
	calls = sortedTimes(calls)
	order := make([]int, len(back))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(back[a], back[b]) })
	sortedBack := make([]int64, len(back))
	cum := make([]int, len(back)+1) // cum[k]: units of the k earliest returns
	for k, i := range order {
		sortedBack[k] = back[i]
		cum[k+1] = cum[k] + backUnits[i]
	}

	worst, early := 0, 0
	var worstOp history.Op
	for _, op := range soldOuts {
		units := p.Total + cum[atMost(sortedBack, op.Call-int64(p.Stale))] - atMost(calls, op.Return) - down
		if units > 0 {
			early++
			if units > worst {
				worst, worstOp = units, op
			}
		}
	}
	if early > 0 {
		out = append(out, Violation{Class: SoldOutEarly, Prize: p.ID, Ops: []history.Op{worstOp},
			Detail: fmt.Sprintf("%d sold_out answer(s) while units remained; at worst %d unit(s), answered at %s", early, worst,
				time.Duration(worstOp.Return))})
	}

	// Over-admission: every admitted request id took a unit; the units that existed are the
	// stock, one per cancelled grab (its unit came back at most once), and what was raised on
	// purpose or by a correction. Where the row's fault lets Redis forget, the grabs the
	// database refused for want of stock are what Redis forgot, caught by the last guard.
	n, forgot := len(admitted), ""
	if h.RedisMayForget {
		n -= len(dbRefused)
		forgot = fmt.Sprintf(" (less %d the database refused after Redis forgot)", len(dbRefused))
	}
	if limit := p.Total + len(cancelledRIDs) + raised; n > limit {
		out = append(out, Violation{Class: OverAdmitted, Prize: p.ID,
			Detail: fmt.Sprintf("%d request ids admitted%s; stock %d + %d cancelled + %d raised = %d units at most",
				n, forgot, p.Total, len(cancelledRIDs), raised, limit)})
	}
	return out
}
