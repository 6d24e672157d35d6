package store

import (
	"time"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Row types mirror the tables created by the migrations; gorm never creates or alters them.

type activityRow struct {
	ID           int64 `gorm:"primaryKey"`
	Name         string
	WindowStart  time.Time
	WindowEnd    time.Time
	IntervalMs   int64
	SessionMs    int64
	PerUserLimit int
	Status       string
	CreatedAt    time.Time
	// PaymentTimeoutMs (0: none) and RegrabAfterCancel: see seckill.Activity.
	PaymentTimeoutMs  int64
	RegrabAfterCancel bool
}

func (activityRow) TableName() string { return "activities" }

func (r activityRow) domain(prizes []seckill.Prize) seckill.Activity {
	return seckill.Activity{
		ID: r.ID, Name: r.Name, WindowStart: r.WindowStart.UTC(), WindowEnd: r.WindowEnd.UTC(),
		Interval:      time.Duration(r.IntervalMs) * time.Millisecond,
		SessionLength: time.Duration(r.SessionMs) * time.Millisecond,
		PerUserLimit:  r.PerUserLimit, Status: seckill.ActivityStatus(r.Status), Prizes: prizes,
		PaymentTimeout:    time.Duration(r.PaymentTimeoutMs) * time.Millisecond,
		RegrabAfterCancel: r.RegrabAfterCancel,
	}
}

type prizeRow struct {
	ID              int64 `gorm:"primaryKey"`
	ActivityID      int64
	Name            string
	StockPerSession int
	Buckets         int
	Admission       string // "fcfs" or "draw" (migration 0015)
	EntryWindowMs   int64
}

func (prizeRow) TableName() string { return "prizes" }

func (r prizeRow) domain() seckill.Prize {
	return seckill.Prize{ID: r.ID, ActivityID: r.ActivityID, Name: r.Name, StockPerSession: r.StockPerSession, Buckets: r.Buckets,
		Admission: seckill.Admission(r.Admission), EntryWindow: time.Duration(r.EntryWindowMs) * time.Millisecond}
}

type sessionRow struct {
	ID         int64 `gorm:"primaryKey"`
	ActivityID int64
	Seq        int
	StartsAt   time.Time
	EndsAt     time.Time
	ClosedAt   *time.Time
}

func (sessionRow) TableName() string { return "sessions" }

func (r sessionRow) domain() seckill.Session {
	s := seckill.Session{ID: r.ID, ActivityID: r.ActivityID, Seq: r.Seq, Start: r.StartsAt.UTC(), End: r.EndsAt.UTC()}
	if r.ClosedAt != nil {
		c := r.ClosedAt.UTC()
		s.ClosedAt = &c
	}
	return s
}

type stockRow struct {
	ID           int64 `gorm:"primaryKey"`
	SessionID    int64
	PrizeID      int64
	Total        int
	LeftStock    int
	Version      int64
	PerUserLimit int
	UpdatedAt    time.Time
	// Buckets is written only by CreateBuckets (the column's default is 1): read-only here.
	Buckets int `gorm:"->"`
	// ArchivedAt is set once the archive job started moving the orders of this
	// session×prize to orders_archive (archive.go): Persist then reads both tables.
	ArchivedAt *time.Time `gorm:"->"`
}

func (stockRow) TableName() string { return "session_stocks" }

func (r stockRow) domain() seckill.Stock {
	return seckill.Stock{SessionID: r.SessionID, PrizeID: r.PrizeID, Total: r.Total, Left: r.LeftStock,
		Version: r.Version, PerUserLimit: r.PerUserLimit, Buckets: r.Buckets}
}

type auditRow struct {
	ID          int64 `gorm:"primaryKey"`
	At          time.Time
	Actor       string
	RemoteAddr  string
	Action      string
	SessionID   *int64
	PrizeID     *int64
	BeforeValue *int64
	AfterValue  *int64
	Detail      string
}

func (auditRow) TableName() string { return "audit_log" }
