package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// keepRuns is how many run reports RunReports keeps: at one run every 10 s, about 11 hours
// of history, a few megabytes.
const keepRuns = 4000

type runRow struct {
	ID         int64 `gorm:"primaryKey"`
	StartedAt  time.Time
	DurationMs int64
	Fence      int64
	Failed     bool
	Report     string
}

func (runRow) TableName() string { return "reconcile_runs" }

// RunReport is one reconciler run's report as saved.
type RunReport struct {
	ID        int64
	StartedAt time.Time
	Failed    bool
	Report    json.RawMessage // the reconciler's report, as it printed it with --json
}

// RunReports keeps the reconciler's run reports (runs that held the lease) for the console.
type RunReports struct {
	db *gorm.DB
}

// NewRunReports returns RunReports on db.
func NewRunReports(db *gorm.DB) *RunReports { return &RunReports{db: db} }

// Save stores one run's report and deletes those beyond the newest keepRuns.
func (r *RunReports) Save(ctx context.Context, startedAt time.Time, durationMS, fence int64, failed bool, report []byte) error {
	row := runRow{StartedAt: startedAt.UTC(), DurationMs: durationMS, Fence: fence, Failed: failed, Report: string(report)}
	if err := r.db.WithContext(ctx).Create(&row).Error; err != nil {
		return fmt.Errorf("save run report: %w", err)
	}
	if err := r.db.WithContext(ctx).Exec("DELETE FROM reconcile_runs WHERE id <= ?", row.ID-keepRuns).Error; err != nil {
		return fmt.Errorf("trim run reports: %w", err)
	}
	return nil
}

// Recent returns the newest limit reports, newest first.
func (r *RunReports) Recent(ctx context.Context, limit int) ([]RunReport, error) {
	var rows []runRow
	if err := r.db.WithContext(ctx).Order("id DESC").Limit(min(max(limit, 1), 200)).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("run reports: %w", err)
	}
	out := make([]RunReport, len(rows))
	for i, row := range rows {
		out[i] = RunReport{ID: row.ID, StartedAt: row.StartedAt.UTC(), Failed: row.Failed, Report: json.RawMessage(row.Report)}
	}
	return out, nil
}
