package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/event"
)

// OutboxEvent is an order event waiting to be published.
type OutboxEvent struct {
	ID      int64 // the order id
	EventID string
	Key     string
	Payload []byte
}

// Outbox reads and stamps the order events still to publish. The orders table is the
// outbox: Persist writes every order with event_published_at NULL.
type Outbox struct {
	db *gorm.DB
}

// NewOutbox returns an Outbox on db.
func NewOutbox(db *gorm.DB) *Outbox { return &Outbox{db: db} }

// Pending returns up to limit orders whose event is unpublished, oldest first, as events.
func (o *Outbox) Pending(ctx context.Context, limit int) ([]OutboxEvent, error) {
	var rows []orderRow
	if err := o.db.WithContext(ctx).Where("event_published_at IS NULL").Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("pending order events: %w", err)
	}
	out := make([]OutboxEvent, len(rows))
	for i, r := range rows {
		ev := event.NewOrderEvent(r.domain())
		payload, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encode order event: %w", err)
		}
		out[i] = OutboxEvent{ID: r.ID, EventID: ev.EventID, Key: r.RequestID, Payload: payload}
	}
	return out, nil
}

// CountPending returns how many order events wait to be published (a metric).
func (o *Outbox) CountPending(ctx context.Context) (int64, error) {
	var n int64
	err := o.db.WithContext(ctx).Model(&orderRow{}).Where("event_published_at IS NULL").Count(&n).Error
	return n, err
}

// MarkPublished stamps orders (by id) whose events were published.
func (o *Outbox) MarkPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := o.db.WithContext(ctx).Model(&orderRow{}).Where("id IN ? AND event_published_at IS NULL", ids).
		Update("event_published_at", at.UTC()).Error
	if err != nil {
		return fmt.Errorf("stamp order events published: %w", err)
	}
	return nil
}

// MarkFound stamps the orders of events found on the topic (by event id) and returns how
// many it changed.
func (o *Outbox) MarkFound(ctx context.Context, eventIDs []string, at time.Time) (int64, error) {
	rids := make([]string, 0, len(eventIDs))
	for _, id := range eventIDs {
		// "order:<request id>:<status>"
		if rest, ok := strings.CutPrefix(id, "order:"); ok {
			if i := strings.LastIndex(rest, ":"); i > 0 {
				rids = append(rids, rest[:i])
			}
		}
	}
	if len(rids) == 0 {
		return 0, nil
	}
	res := o.db.WithContext(ctx).Model(&orderRow{}).Where("request_id IN ? AND event_published_at IS NULL", rids).
		Update("event_published_at", at.UTC())
	if res.Error != nil {
		return 0, fmt.Errorf("stamp found order events: %w", res.Error)
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
// order is stamped published.
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
