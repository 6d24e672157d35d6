package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/lease"
)

// fenced runs fn in a transaction that first reads the lease row with a shared lock and
// refuses (lease.ErrStale) when its fence moved on. The shared lock holds a takeover's
// UPDATE of that row until this transaction ends, so no newer holder can appear between the
// check and the commit.
func fenced(ctx context.Context, db *gorm.DB, f lease.Fence, fn func(tx *gorm.DB) error) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur int64
		if err := tx.Raw("SELECT fence FROM leases WHERE name = ? LOCK IN SHARE MODE", f.Name).Row().Scan(&cur); err != nil {
			return fmt.Errorf("read fence of lease %s: %w", f.Name, err)
		}
		if cur != f.Number {
			return fmt.Errorf("lease %s: fence %d, current %d: %w", f.Name, f.Number, cur, lease.ErrStale)
		}
		return fn(tx)
	})
}

type replayOffsetRow struct {
	Topic       string `gorm:"primaryKey"`
	PartitionID int    `gorm:"primaryKey"`
	NextOffset  int64
	Fence       int64
	UpdatedAt   time.Time
}

func (replayOffsetRow) TableName() string { return "replay_offsets" }

// ReplayOffsets returns, per partition of topic, the next offset to replay (partitions
// never replayed are absent).
func (c *Catalog) ReplayOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	var rows []replayOffsetRow
	if err := c.db.WithContext(ctx).Where("topic = ?", topic).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("replay offsets of %s: %w", topic, err)
	}
	out := make(map[int]int64, len(rows))
	for _, r := range rows {
		out[r.PartitionID] = r.NextOffset
	}
	return out, nil
}

// SaveReplayOffset records that every message of topic/partition below next was replayed,
// under the fence of the replayer's lease.
func (c *Catalog) SaveReplayOffset(ctx context.Context, f lease.Fence, topic string, partition int, next int64) error {
	err := fenced(ctx, c.db, f, func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{DoUpdates: clause.AssignmentColumns([]string{"next_offset", "fence", "updated_at"})}).
			Create(&replayOffsetRow{Topic: topic, PartitionID: partition, NextOffset: next, Fence: f.Number, UpdatedAt: c.now().UTC()}).Error
	})
	if err != nil {
		return fmt.Errorf("save replay offset %s/%d=%d: %w", topic, partition, next, err)
	}
	return nil
}
