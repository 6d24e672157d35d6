package linearcheck

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/seckill-pipeline/seckill/internal/history"
)

// The buyer's model is one user's grabs of one prize: each request id the user's keys name
// is a register whose value only moves forward,
//
//	absent → queued → succeeded → cancelled
//	               ↘ rejected
//
// and at most Limit of them hold a slot at any moment. The pipeline moves a grab forward on
// its own (the consumer persists it, a payment timeout cancels it) and gives a slot back on
// its own (a rejection for drift, a cancellation that releases it), without any client
// operation: the model takes those steps nondeterministically, at the latest when an answer
// needs them, and commits to them: a grab the model had to reject to let a later grab in can
// never be read as succeeded.
//
// The state is a string, one byte per request id of the partition (its phase, and whether
// its slot was given back), so states compare with == and Porcupine merges them cheaply.
const (
	absent byte = iota
	queued
	succeeded
	rejected
	cancelled

	released  byte = 8 // the grab no longer holds a slot of the user's limit
	phaseBits byte = 7
)

var phaseNames = map[string]byte{"queued": queued, "succeeded": succeeded, "rejected": rejected, "cancelled": cancelled}

// outcome is what an answer says about the register, classified once from the HTTP answer.
type outcome uint8

const (
	unknown   outcome = iota // no answer, a timeout, a 5xx that may have admitted: may or may not have taken effect
	noEffect                 // refused before anything was written (429, 503 overloaded, not_loaded, rebalancing)
	hasStatus                // 202 of a grab or 200 of a read: Phase holds the status
	soldOut                  // 409 sold_out
	limitHit                 // 409 limit_reached
	notFound                 // 404 of a status read
	refused                  // any other refusal that says nothing about this register (not_open, …)
)

type input struct {
	read bool // a status read; else a grab attempt
	slot int  // the request id's index in the partition
	rid  string
}

type output struct {
	what  outcome
	phase byte
	text  string // the answer as recorded, for people
}

func classify(op history.Op) output {
	o := output{text: fmt.Sprintf("%d %s", op.Code, op.Out)}
	if op.Code == 0 {
		o.text = "no answer: " + op.Err
		return o
	}
	status, _, _ := strings.Cut(op.Out, "/")
	switch {
	case op.Code == 202 || (op.Kind == history.Status && op.Code == 200):
		if p, ok := phaseNames[status]; ok {
			o.what, o.phase = hasStatus, p
		} // an unknown status word stays "unknown": the contract test owns the vocabulary
	case op.Code == 409 && op.Out == "sold_out":
		o.what = soldOut
	case op.Code == 409 && op.Out == "limit_reached":
		o.what = limitHit
	case op.Kind == history.Status && op.Code == 404:
		o.what = notFound
	case op.Code == 429, op.Code == 503 && op.Out != "unavailable":
		// Refused at the door or before the script: overloaded, not_loaded, rebalancing.
		o.what = noEffect
	case op.Code == 503 || op.Code >= 500:
		o.what = unknown // unavailable: the verdict may not have arrived; poll it
	default:
		o.what = refused
	}
	return o
}

func phase(s string, slot int) byte {
	if slot < len(s) {
		return s[slot]
	}
	return absent
}

func set(s string, slot int, v byte) string {
	b := []byte(s)
	for len(b) <= slot {
		b = append(b, absent)
	}
	b[slot] = v
	return string(b)
}

// forward says whether a register may move from phase p to q (the same phase included).
func forward(p, q byte) bool {
	switch p {
	case queued:
		return q != absent
	case succeeded:
		return q == succeeded || q == cancelled
	default:
		return p == q
	}
}

// held counts the grabs holding a slot.
func held(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i]&phaseBits != absent && s[i]&released == 0 {
			n++
		}
	}
	return n
}

// releases is every state one slot freer than s: a held grab the pipeline rejected on its
// own (a rejection for drift gives the slot back), or, where cancellations give slots back
// (regrab), one it cancelled on its own or a cancelled one whose slot came back.
func releases(s string, regrab bool) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		v := s[i]
		if v&released != 0 {
			continue
		}
		switch v & phaseBits {
		case queued:
			out = append(out, set(s, i, rejected|released))
			if regrab {
				out = append(out, set(s, i, cancelled|released))
			}
		case succeeded:
			if regrab {
				out = append(out, set(s, i, cancelled|released))
			}
		case rejected:
			out = append(out, set(s, i, v|released))
		case cancelled:
			if regrab {
				out = append(out, set(s, i, v|released))
			}
		}
	}
	return out
}

// underLimit returns s, or the states one release away from it, whichever hold fewer than
// limit slots; none when no such state exists.
func underLimit(s string, r rules) []string {
	if r.anyLimit || held(s) < r.limit {
		return []string{s}
	}
	var out []string
	for _, r2 := range releases(s, r.regrab) {
		if held(r2) < r.limit {
			out = append(out, r2)
		}
	}
	return out
}

// rules are the sale's rules the buyer's model needs.
type rules struct {
	limit  int
	regrab bool // a cancellation gives the buyer's slot back
	// anyLimit drops every check of the slots (admissions, limit_reached, sold_out at the
	// limit): what is left of the model is the registers, which tells the classes apart.
	anyLimit bool
}

func admit(s string, slot int, r rules) []string {
	var out []string
	for _, u := range underLimit(s, r) {
		out = append(out, set(u, slot, queued))
	}
	return out
}

// buyerModel is the model of one user's grabs of one prize under the sale's rules.
func buyerModel(r rules) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{""} },
		Step: func(state, in, out any) []any {
			return wrap(step(state.(string), in.(input), out.(output), r))
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(input), out.(output)
			if i.read {
				return fmt.Sprintf("status(%s) → %s", i.rid, o.text)
			}
			return fmt.Sprintf("grab(%s) → %s", i.rid, o.text)
		},
		DescribeState: func(state any) string { return describe(state.(string)) },
	}
	return nm.ToModel()
}

func wrap(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// step is the sequential specification: the states the partition may be in after the
// operation, none when the answer is impossible from s.
func step(s string, in input, out output, r rules) []string {
	p := phase(s, in.slot) & phaseBits
	if in.read {
		switch out.what {
		case hasStatus:
			if p == absent || !forward(p, out.phase) {
				return nil
			}
			return []string{set(s, in.slot, out.phase|phase(s, in.slot)&released)}
		case notFound:
			if p != absent {
				return nil
			}
		}
		return []string{s}
	}
	switch out.what {
	case unknown:
		if p == absent {
			return append([]string{s}, admit(s, in.slot, r)...)
		}
	case hasStatus:
		if p == absent {
			if out.phase != queued {
				return nil
			}
			return admit(s, in.slot, r)
		}
		if !forward(p, out.phase) {
			return nil
		}
		return []string{set(s, in.slot, out.phase|phase(s, in.slot)&released)}
	case soldOut:
		// The script checks the user's limit before the stock: a sold_out answer says the
		// user held fewer than limit slots, and that this key had no grab.
		if p != absent {
			return nil
		}
		return underLimit(s, r)
	case limitHit:
		if p != absent || (!r.anyLimit && held(s) < r.limit) {
			return nil
		}
	}
	return []string{s}
}

func describe(s string) string {
	if s == "" {
		return "no grab"
	}
	names := [...]string{"-", "queued", "succeeded", "rejected", "cancelled"}
	parts := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		parts[i] = fmt.Sprintf("#%d %s", i, names[s[i]&phaseBits])
		if s[i]&released != 0 {
			parts[i] += " (slot back)"
		}
	}
	return fmt.Sprintf("%s; %d slot(s) held", strings.Join(parts, ", "), held(s))
}
