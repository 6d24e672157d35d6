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
	ID      int64 // the order id; for a Follow event, its order_events row id
	EventID string
	Key     string
	Payload []byte
	Schema  string // the schema header: order.v1 (creation) or order.v2 (follow events)
	Follow  bool   // an event after the order's creation (order_events), not the creation event
	// TraceParent is the order's stored trace context (W3C traceparent), "" when its
	// purchase was not traced: the event's produce span continues that trace.
	TraceParent string
}

// Outbox reads and stamps the order events still to publish. The orders table is the
// outbox of creation events: Persist writes every order with event_published_at NULL. The
// events that follow a creation (cancelled, refund required) wait in order_events.
type Outbox struct {
	db *gorm.DB
}

// NewOutbox returns an Outbox on db.
func NewOutbox(db *gorm.DB) *Outbox { return &Outbox{db: db} }

// Pending returns up to limit unpublished events, oldest first: creation events, then
// follow events whose order's creation event is already published, so on the topic (one
// partition per order, by key) an order's cancellation always comes after its creation.
func (o *Outbox) Pending(ctx context.Context, limit int) ([]OutboxEvent, error) {
	var rows []orderRow
	// Orders with a grab partition are the consumer's to publish (EventProgress), not the
	// relay's: ix_order_relay finds the stamp path's without walking theirs.
	if err := o.db.WithContext(ctx).Where("event_published_at IS NULL AND grab_partition IS NULL").Order("id").
		Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("pending order events: %w", err)
	}
	out := make([]OutboxEvent, 0, len(rows))
	for _, r := range rows {
		ev, err := creationEvent(r)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	if len(out) >= limit {
		return out, nil
	}
	var follow []orderEventRow
	err := o.db.WithContext(ctx).Table("order_events AS e").Select("e.*").
		Joins("JOIN orders o ON o.id = e.order_id").
		Where("e.published_at IS NULL AND " + publishedSQL).
		Order("e.id").Limit(limit - len(out)).Find(&follow).Error
	if err != nil {
		return nil, fmt.Errorf("pending follow events: %w", err)
	}
	if len(follow) == 0 {
		return out, nil
	}
	ids := make([]int64, len(follow))
	for i, f := range follow {
		ids[i] = f.OrderID
	}
	var orders []orderRow
	if err := o.db.WithContext(ctx).Where("id IN ?", ids).Find(&orders).Error; err != nil {
		return nil, fmt.Errorf("orders of follow events: %w", err)
	}
	byID := make(map[int64]orderRow, len(orders))
	for _, r := range orders {
		byID[r.ID] = r
	}
	for _, f := range follow {
		r := byID[f.OrderID]
		ev := event.NewFollowEvent(r.domain(), f.Type, f.Reason, f.OccurredAt)
		payload, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encode order event: %w", err)
		}
		out = append(out, OutboxEvent{ID: f.ID, EventID: f.EventID, Key: r.RequestID, Payload: payload, Schema: ev.Schema(), Follow: true,
			TraceParent: traceParent(r.TraceContext)})
	}
	return out, nil
}

// creationEvent is an order's creation event as published.
func creationEvent(r orderRow) (OutboxEvent, error) {
	ev := event.NewOrderEvent(r.domain())
	payload, err := json.Marshal(ev)
	if err != nil {
		return OutboxEvent{}, fmt.Errorf("encode order event: %w", err)
	}
	return OutboxEvent{ID: r.ID, EventID: ev.EventID, Key: r.RequestID, Payload: payload, Schema: ev.Schema(),
		TraceParent: traceParent(r.TraceContext)}, nil
}

// CountPending returns how many order events wait to be published (a metric): the stamp
// path's unstamped orders, the batch path's orders past their partition's progress, and
// the follow events.
func (o *Outbox) CountPending(ctx context.Context) (int64, error) {
	var n int64
	err := o.db.WithContext(ctx).Raw(`SELECT
		(SELECT COUNT(*) FROM orders WHERE event_published_at IS NULL AND grab_partition IS NULL) +
		(SELECT COUNT(*) FROM orders o JOIN order_event_progress g ON g.grab_partition = o.grab_partition
			WHERE o.grab_seq >= g.next_seq AND o.event_published_at IS NULL) +
		(SELECT COUNT(*) FROM order_events WHERE published_at IS NULL)`).Row().Scan(&n)
	return n, err
}

// MarkFollowPublished stamps follow events (by order_events id) that were published.
func (o *Outbox) MarkFollowPublished(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := o.db.WithContext(ctx).Model(&orderEventRow{}).Where("id IN ? AND published_at IS NULL", ids).
		Update("published_at", at.UTC()).Error
	if err != nil {
		return fmt.Errorf("stamp follow events published: %w", err)
	}
	return nil
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

// MarkFound stamps the events found on the topic (by event id) and returns how many it
// changed: creation events ("order:<rid>:succeeded|rejected") on their order, follow
// events ("order:<rid>:cancelled|refund_required") on their order_events row.
func (o *Outbox) MarkFound(ctx context.Context, eventIDs []string, at time.Time) (int64, error) {
	rids := make([]string, 0, len(eventIDs))
	var follow []string
	for _, id := range eventIDs {
		// "order:<request id>:<status>"
		if rest, ok := strings.CutPrefix(id, "order:"); ok {
			if i := strings.LastIndex(rest, ":"); i > 0 {
				switch rest[i+1:] {
				case "succeeded", "rejected":
					rids = append(rids, rest[:i])
				default:
					follow = append(follow, id)
				}
			}
		}
	}
	var n int64
	if len(rids) > 0 {
		res := o.db.WithContext(ctx).Model(&orderRow{}).Where("request_id IN ? AND event_published_at IS NULL AND grab_partition IS NULL", rids).
			Update("event_published_at", at.UTC())
		if res.Error != nil {
			return 0, fmt.Errorf("stamp found order events: %w", res.Error)
		}
		n += res.RowsAffected
	}
	if len(follow) > 0 {
		res := o.db.WithContext(ctx).Model(&orderEventRow{}).Where("event_id IN ? AND published_at IS NULL", follow).
			Update("published_at", at.UTC())
		if res.Error != nil {
			return n, fmt.Errorf("stamp found follow events: %w", res.Error)
		}
		n += res.RowsAffected
	}
	return n, nil
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
