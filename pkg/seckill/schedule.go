package seckill

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Limits on what an operator may create, so a typo cannot materialise millions of rows.
const (
	MaxWindow       = 366 * 24 * time.Hour
	MaxSessions     = 5000
	MaxPrizes       = 100
	MaxStock        = 10_000_000
	MaxPerUserLimit = 100
	MaxBuckets      = 1024 // stock buckets of one session×prize (the gateway's SECKILL_BUCKET_MAX may say fewer)
	MinSession      = time.Second
	// A draw prize's entry window: long enough for a crowd to enter, short enough that the
	// draw is a moment of the sale and not a second sale.
	MinEntryWindow = time.Second
	MaxEntryWindow = time.Hour
)

// Window is one session's [Start, End).
type Window struct {
	Start, End time.Time
}

// Schedule materialises an activity's sessions in UTC: one starting every interval from
// start, each lasting length, only while it fits wholly before end, so a session never
// overlaps the next (length ≤ interval) and the last one ends by the window's end.
func Schedule(start, end time.Time, interval, length time.Duration) ([]Window, error) {
	switch {
	case interval <= 0:
		return nil, errors.New("interval must be > 0")
	case length <= 0 || length > interval:
		return nil, errors.New("session length must be > 0 and ≤ interval")
	case !end.After(start):
		return nil, errors.New("window end must be after its start")
	}
	start, end = start.UTC(), end.UTC()
	var out []Window
	for s := start; !s.Add(length).After(end); s = s.Add(interval) {
		if len(out) == MaxSessions {
			return nil, fmt.Errorf("schedule has more than %d sessions", MaxSessions)
		}
		out = append(out, Window{Start: s, End: s.Add(length)})
	}
	if len(out) == 0 {
		return nil, errors.New("window is shorter than one session")
	}
	return out, nil
}

// FieldError names the input field that is wrong and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ValidationError lists every wrong field of one input.
type ValidationError []FieldError

func (v ValidationError) Error() string {
	parts := make([]string, len(v))
	for i, f := range v {
		parts[i] = f.Error()
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Validate checks an activity about to be created and returns a ValidationError naming
// every wrong field, or nil.
func (a Activity) Validate() error {
	var errs ValidationError
	add := func(field, msg string) { errs = append(errs, FieldError{field, msg}) }
	name := strings.TrimSpace(a.Name)
	if name == "" || len(name) > 128 {
		add("name", "must be 1 to 128 characters")
	}
	if a.WindowStart.IsZero() {
		add("window_start", "is required")
	}
	if a.WindowEnd.IsZero() {
		add("window_end", "is required")
	}
	if !a.WindowStart.IsZero() && !a.WindowEnd.IsZero() {
		if !a.WindowEnd.After(a.WindowStart) {
			add("window_end", "must be after window_start")
		} else if a.WindowEnd.Sub(a.WindowStart) > MaxWindow {
			add("window_end", fmt.Sprintf("window longer than %s", MaxWindow))
		}
	}
	if a.Interval <= 0 {
		add("interval", "must be > 0")
	}
	if a.SessionLength < MinSession {
		add("session_length", fmt.Sprintf("must be at least %s", MinSession))
	} else if a.Interval > 0 && a.SessionLength > a.Interval {
		add("session_length", "must be ≤ interval")
	}
	if a.PerUserLimit < 1 || a.PerUserLimit > MaxPerUserLimit {
		add("per_user_limit", fmt.Sprintf("must be 1 to %d", MaxPerUserLimit))
	}
	if a.PaymentTimeout != 0 && (a.PaymentTimeout < MinPaymentTimeout || a.PaymentTimeout > MaxPaymentTimeout) {
		add("payment_timeout", fmt.Sprintf("must be 0 (off) or %s to %s", MinPaymentTimeout, MaxPaymentTimeout))
	}
	if len(a.Prizes) == 0 {
		add("prizes", "at least one prize is required")
	} else if len(a.Prizes) > MaxPrizes {
		add("prizes", fmt.Sprintf("at most %d prizes", MaxPrizes))
	}
	seen := map[string]bool{}
	for i, p := range a.Prizes {
		field := fmt.Sprintf("prizes[%d]", i)
		pn := strings.TrimSpace(p.Name)
		if pn == "" || len(pn) > 128 {
			add(field+".name", "must be 1 to 128 characters")
		} else if seen[pn] {
			add(field+".name", "duplicate prize name")
		}
		seen[pn] = true
		if p.StockPerSession < 0 || p.StockPerSession > MaxStock {
			add(field+".stock", fmt.Sprintf("must be 0 to %d", MaxStock))
		}
		if p.Buckets < 0 || p.Buckets > MaxBuckets {
			add(field+".buckets", fmt.Sprintf("must be 1 to %d", MaxBuckets))
		}
		switch p.Admission {
		case "", AdmissionFCFS:
			if p.EntryWindow != 0 {
				add(field+".entry_window", "only a draw prize has an entry window")
			}
		case AdmissionDraw:
			switch {
			case p.EntryWindow < MinEntryWindow || p.EntryWindow > MaxEntryWindow:
				add(field+".entry_window", fmt.Sprintf("must be %s to %s", MinEntryWindow, MaxEntryWindow))
			case a.SessionLength >= MinSession && p.EntryWindow >= a.SessionLength:
				add(field+".entry_window", "must be shorter than the session: the draw's winners buy within it")
			}
			// One place admits the winners in rank order; a draw spreads the crowd in time,
			// which is what buckets are for.
			if p.Buckets > 1 {
				add(field+".buckets", "a draw prize has one stock bucket")
			}
		default:
			add(field+".admission", `must be "fcfs" or "draw"`)
		}
	}
	if len(errs) == 0 {
		if _, err := Schedule(a.WindowStart, a.WindowEnd, a.Interval, a.SessionLength); err != nil {
			add("window_end", err.Error())
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
