package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// OutboxEvent is an order event waiting to be published.
type OutboxEvent struct {
	ID      int64
	EventID string
	Key     string
	Payload []byte
}

// Outbox reads and marks the order events written by Persist.
type Outbox struct {
	db *gorm.DB
}

// NewOutbox returns an Outbox on db.
func NewOutbox(db *gorm.DB) *Outbox { return &Outbox{db: db} }

// Pending returns up to limit unpublished events, oldest first.
func (o *Outbox) Pending(ctx context.Context, limit int) ([]OutboxEvent, error) {
	var rows []outboxRow
	if err := o.db.WithContext(ctx).Where("published_at IS NULL").Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	out := make([]OutboxEvent, len(rows))
	for i, r := range rows {
		out[i] = OutboxEvent{ID: r.ID, EventID: r.EventID, Key: r.MsgKey, Payload: []byte(r.Payload)}
	}
	return out, nil
}

// CountPending returns how many events wait to be published (a metric).
func (o *Outbox) CountPending(ctx context.Context) (int64, error) {
	var n int64
	err := o.db.WithContext(ctx).Model(&outboxRow{}).Where("published_at IS NULL").Count(&n).Error
	return n, err
}

// MarkPublished marks events (by outbox id) as published.
func (o *Outbox) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := o.db.WithContext(ctx).Model(&outboxRow{}).Where("id IN ? AND published_at IS NULL", ids).
		Update("published_at", at.UTC()).Error
	if err != nil {
		return fmt.Errorf("mark outbox published: %w", err)
	}
	return nil
}

// MarkFound marks events found on the topic (by event id) as published and returns how
// many rows that changed.
func (o *Outbox) MarkFound(ctx context.Context, eventIDs []string, at time.Time) (int64, error) {
	if len(eventIDs) == 0 {
		return 0, nil
	}
	res := o.db.WithContext(ctx).Model(&outboxRow{}).Where("event_id IN ? AND published_at IS NULL", eventIDs).
		Update("published_at", at.UTC())
	if res.Error != nil {
		return 0, fmt.Errorf("mark outbox found: %w", res.Error)
	}
	return res.RowsAffected, nil
}

type checkpointRow struct {
	Topic       string `gorm:"primaryKey"`
	PartitionID int    `gorm:"primaryKey"`
	NextOffset  int64
}

func (checkpointRow) TableName() string { return "outbox_checkpoints" }

// Checkpoints returns, per partition of topic, the offset below which every message's
// outbox row is marked published.
func (o *Outbox) Checkpoints(ctx context.Context, topic string) (map[int]int64, error) {
	var rows []checkpointRow
	if err := o.db.WithContext(ctx).Where("topic = ?", topic).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("outbox checkpoints: %w", err)
	}
	out := make(map[int]int64, len(rows))
	for _, r := range rows {
		out[r.PartitionID] = r.NextOffset
	}
	return out, nil
}

// SetCheckpoints stores checkpoints for topic (only ever moving them forward).
func (o *Outbox) SetCheckpoints(ctx context.Context, topic string, next map[int]int64) error {
	if len(next) == 0 {
		return nil
	}
	rows := make([]checkpointRow, 0, len(next))
	for p, off := range next {
		rows = append(rows, checkpointRow{Topic: topic, PartitionID: p, NextOffset: off})
	}
	err := o.db.WithContext(ctx).Clauses(clause.OnConflict{
		DoUpdates: clause.Assignments(map[string]any{"next_offset": gorm.Expr("GREATEST(next_offset, VALUES(next_offset))")}),
	}).Create(&rows).Error
	if err != nil {
		return fmt.Errorf("set outbox checkpoints: %w", err)
	}
	return nil
}
