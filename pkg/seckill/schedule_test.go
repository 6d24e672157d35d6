package seckill

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func TestSchedule(t *testing.T) {
	tests := []struct {
		name             string
		start, end       time.Time
		interval, length time.Duration
		wantN            int
		wantLastEnd      time.Time
		wantErr          string
	}{
		{"every 30m from 10:00 to 22:00", t0, t0.Add(12 * time.Hour), 30 * time.Minute, 10 * time.Minute, 24, t0.Add(11*time.Hour + 40*time.Minute), ""},
		{"window not a multiple: last partial session dropped", t0, t0.Add(70 * time.Minute), 30 * time.Minute, 20 * time.Minute, 2, t0.Add(50 * time.Minute), ""},
		{"window not a multiple: last session fits exactly", t0, t0.Add(80 * time.Minute), 30 * time.Minute, 20 * time.Minute, 3, t0.Add(80 * time.Minute), ""},
		{"one session only", t0, t0.Add(15 * time.Minute), time.Hour, 15 * time.Minute, 1, t0.Add(15 * time.Minute), ""},
		{"session length = interval: back to back", t0, t0.Add(time.Hour), 15 * time.Minute, 15 * time.Minute, 4, t0.Add(time.Hour), ""},
		{"window shorter than a session", t0, t0.Add(5 * time.Minute), time.Hour, 10 * time.Minute, 0, time.Time{}, "shorter than one session"},
		{"length above interval", t0, t0.Add(time.Hour), 10 * time.Minute, 20 * time.Minute, 0, time.Time{}, "≤ interval"},
		{"zero interval", t0, t0.Add(time.Hour), 0, time.Minute, 0, time.Time{}, "interval"},
		{"end before start", t0, t0.Add(-time.Hour), time.Minute, time.Minute, 0, time.Time{}, "after its start"},
		{"too many sessions", t0, t0.Add(MaxWindow), time.Second, time.Second, 0, time.Time{}, "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Schedule(tc.start, tc.end, tc.interval, tc.length)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.wantN {
				t.Fatalf("%d sessions, want %d", len(got), tc.wantN)
			}
			if !got[len(got)-1].End.Equal(tc.wantLastEnd) {
				t.Errorf("last session ends %s, want %s", got[len(got)-1].End, tc.wantLastEnd)
			}
			for i, w := range got {
				if w.End.After(tc.end) {
					t.Errorf("session %d ends after the window", i)
				}
				if i > 0 && w.Start.Before(got[i-1].End) {
					t.Errorf("session %d overlaps the previous one", i)
				}
				if w.Start.Location() != time.UTC {
					t.Errorf("session %d not in UTC", i)
				}
			}
		})
	}
}

func TestActivityValidate(t *testing.T) {
	valid := Activity{
		Name: "double eleven", WindowStart: t0, WindowEnd: t0.Add(2 * time.Hour),
		Interval: 30 * time.Minute, SessionLength: 10 * time.Minute, PerUserLimit: 1,
		Prizes: []Prize{{Name: "phone", StockPerSession: 100}, {Name: "case", StockPerSession: 0}},
	}
	tests := []struct {
		name   string
		mutate func(*Activity)
		field  string // "" = valid
	}{
		{"valid", func(*Activity) {}, ""},
		{"empty name", func(a *Activity) { a.Name = " " }, "name"},
		{"end before start", func(a *Activity) { a.WindowEnd = t0.Add(-time.Minute) }, "window_end"},
		{"absurd window", func(a *Activity) { a.WindowEnd = t0.Add(MaxWindow + time.Hour) }, "window_end"},
		{"zero interval", func(a *Activity) { a.Interval = 0 }, "interval"},
		{"length above interval", func(a *Activity) { a.SessionLength = time.Hour }, "session_length"},
		{"limit 0", func(a *Activity) { a.PerUserLimit = 0 }, "per_user_limit"},
		{"no prizes", func(a *Activity) { a.Prizes = nil }, "prizes"},
		{"negative stock", func(a *Activity) { a.Prizes = []Prize{{Name: "x", StockPerSession: -1}} }, "prizes[0].stock"},
		{"duplicate prize", func(a *Activity) { a.Prizes = []Prize{{Name: "x"}, {Name: "x"}} }, "prizes[1].name"},
		{"window shorter than a session", func(a *Activity) { a.WindowEnd = t0.Add(5 * time.Minute) }, "window_end"},
		{"payment timeout 15m", func(a *Activity) { a.PaymentTimeout = 15 * time.Minute }, ""},
		{"payment timeout off, regrab allowed", func(a *Activity) { a.RegrabAfterCancel = true }, ""},
		{"payment timeout under a second", func(a *Activity) { a.PaymentTimeout = time.Millisecond }, "payment_timeout"},
		{"payment timeout over a day", func(a *Activity) { a.PaymentTimeout = 25 * time.Hour }, "payment_timeout"},
		{"negative payment timeout", func(a *Activity) { a.PaymentTimeout = -time.Minute }, "payment_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := valid
			a.Prizes = append([]Prize(nil), valid.Prizes...)
			tc.mutate(&a)
			err := a.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var verr ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			for _, f := range verr {
				if f.Field == tc.field {
					return
				}
			}
			t.Fatalf("errors %v do not name %q", verr, tc.field)
		})
	}
}

func TestSessionOpenAt(t *testing.T) {
	closed := t0.Add(5 * time.Minute)
	s := Session{Start: t0, End: t0.Add(10 * time.Minute)}
	c := s
	c.ClosedAt = &closed
	tests := []struct {
		s    Session
		at   time.Time
		want bool
	}{
		{s, t0.Add(-time.Nanosecond), false},
		{s, t0, true},
		{s, t0.Add(10*time.Minute - time.Nanosecond), true},
		{s, t0.Add(10 * time.Minute), false},
		{c, t0.Add(4 * time.Minute), true},
		{c, closed, false},
	}
	for i, tc := range tests {
		if got := tc.s.OpenAt(tc.at); got != tc.want {
			t.Errorf("case %d: OpenAt(%s) = %v, want %v", i, tc.at, got, tc.want)
		}
	}
}

func TestDownstreamCancelReason(t *testing.T) {
	for _, tc := range []struct {
		reason Reason
		want   bool
	}{
		{ReasonBuyerCancelled, true},
		{ReasonPaymentFailed, true},
		{ReasonMerchantCancelled, true},
		{ReasonPaymentTimeout, false}, // the pipeline's own
		{ReasonSoldOut, false},
		{"", false},
		{"Buyer_Cancelled", false},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			if got := DownstreamCancelReason(tc.reason); got != tc.want {
				t.Fatalf("DownstreamCancelReason(%q) = %v, want %v", tc.reason, got, tc.want)
			}
		})
	}
}

func TestSessionPrizeString(t *testing.T) {
	if got := (SessionPrize{Session: 7, Prize: 12}).String(); got != "session 7 prize 12" {
		t.Fatalf("String() = %q", got)
	}
}
