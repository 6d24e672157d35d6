package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// GrabSource says which grab partition's batch a persistence transaction writes, under
// which claim of the partition: its orders carry Partition and Seq, and their events are
// published from memory by the claim's holder, if Epoch is still the partition's.
type GrabSource struct {
	Partition int
	Epoch     int64
	Seq       int64
}

// Progress is a grab partition's row in order_event_progress.
type Progress struct {
	Epoch    int64
	NextSeq  int64         // every order of the partition with a lower grab_seq is on the topic
	ScanFrom map[int]int64 // order-topic offsets below which no event past NextSeq lies
}

// EventProgress records how far each grab partition's order events are published: one row
// per partition, written once per batch, in place of a stamp on every order (migration
// 0012). Only the holder of the partition's named lock writes it.
type EventProgress struct {
	db  *gorm.DB
	now func() time.Time
}

// NewEventProgress returns the progress store on db.
func NewEventProgress(db *gorm.DB) *EventProgress { return &EventProgress{db: db, now: time.Now} }

// ProgressLockName names the MySQL named lock of a grab partition's events, per database
// and grab topic as RelayLockName, hashed when MySQL would refuse the name.
func ProgressLockName(dsn, grabTopic string, partition int) string {
	return lockName("seckill.order-events.", dsn, fmt.Sprintf("%s.%d", grabTopic, partition))
}

// Claim bumps the partition's epoch (creating its row) and returns the row. A persistence
// transaction of an older claim still in flight holds the row with a shared lock: the bump
// waits for it, so its orders are committed, and visible to the recovery that follows,
// before the claim returns; any later one sees the new epoch and takes the stamp path.
func (e *EventProgress) Claim(ctx context.Context, partition int) (Progress, error) {
	var row struct {
		Epoch    int64
		NextSeq  int64
		ScanFrom string
	}
	err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO order_event_progress (grab_partition, epoch, next_seq, scan_from, updated_at)
			VALUES (?, 1, 0, '{}', ?) ON DUPLICATE KEY UPDATE epoch = epoch + 1, updated_at = VALUES(updated_at)`,
			partition, e.now().UTC()).Error; err != nil {
			return err
		}
		return tx.Raw("SELECT epoch, next_seq, scan_from FROM order_event_progress WHERE grab_partition = ?", partition).
			Row().Scan(&row.Epoch, &row.NextSeq, &row.ScanFrom)
	})
	if err != nil {
		return Progress{}, fmt.Errorf("claim order events of grab partition %d: %w", partition, err)
	}
	p := Progress{Epoch: row.Epoch, NextSeq: row.NextSeq, ScanFrom: map[int]int64{}}
	if err := json.Unmarshal([]byte(row.ScanFrom), &p.ScanFrom); err != nil {
		return Progress{}, fmt.Errorf("scan_from of grab partition %d: %w", partition, err)
	}
	return p, nil
}

// Advance moves the partition's next_seq to next, and its scan_from when scanFrom is not
// nil, if epoch is still the partition's and next is ahead: never backwards, never for a
// claim that was taken over. ok is false when nothing changed.
func (e *EventProgress) Advance(ctx context.Context, partition int, epoch, next int64, scanFrom map[int]int64) (bool, error) {
	set, args := "next_seq = ?, updated_at = ?", []any{next, e.now().UTC()}
	if scanFrom != nil {
		b, err := json.Marshal(scanFrom)
		if err != nil {
			return false, err
		}
		set, args = set+", scan_from = ?", append(args, string(b))
	}
	args = append(args, partition, epoch, next)
	res := e.db.WithContext(ctx).Exec("UPDATE order_event_progress SET "+set+
		" WHERE grab_partition = ? AND epoch = ? AND next_seq < ?", args...)
	if res.Error != nil {
		return false, fmt.Errorf("advance order events of grab partition %d to %d: %w", partition, next, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// SeqEvent is an order event of the batch path with its batch sequence number.
type SeqEvent struct {
	OutboxEvent
	Seq int64
}

// Unrecorded returns the creation events of the partition's orders at or past seq from
// whose stamp is not set, in sequence order: those a crash may have left unpublished.
func (e *EventProgress) Unrecorded(ctx context.Context, partition int, from int64) ([]SeqEvent, error) {
	var rows []orderRow
	if err := e.db.WithContext(ctx).Where("grab_partition = ? AND grab_seq >= ? AND event_published_at IS NULL", partition, from).
		Order("grab_seq, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("unrecorded order events of grab partition %d: %w", partition, err)
	}
	out := make([]SeqEvent, 0, len(rows))
	for _, r := range rows {
		ev, err := creationEvent(r)
		if err != nil {
			return nil, err
		}
		out = append(out, SeqEvent{OutboxEvent: ev, Seq: *r.GrabSeq})
	}
	return out, nil
}

// publishedSQL is true for an order (alias o) whose creation event is on the topic: stamped,
// or below its grab partition's progress.
var publishedSQL = PublishedSQL("o")

// PublishedSQL is the condition "this order's creation event is published" on the orders
// table named (or aliased) table: its stamp is set, or its grab_seq is below its partition's
// next_seq. Every reader of "published" uses it (and tests, to wait for it).
func PublishedSQL(table string) string {
	return strings.NewReplacer("T.", table+".").Replace(`(T.event_published_at IS NOT NULL OR IFNULL(T.grab_seq <
	(SELECT g.next_seq FROM order_event_progress g WHERE g.grab_partition = T.grab_partition), FALSE))`)
}

// fenceSource reads the partition's epoch with a shared lock in tx and reports whether src
// still holds the claim: the lock keeps a takeover's Claim waiting until tx ends.
func fenceSource(tx *gorm.DB, src *GrabSource) (bool, error) {
	if src == nil {
		return false, nil
	}
	var epoch int64
	rows, err := tx.Raw("SELECT epoch FROM order_event_progress WHERE grab_partition = ? LOCK IN SHARE MODE", src.Partition).Rows()
	if err != nil {
		return false, fmt.Errorf("read claim of grab partition %d: %w", src.Partition, err)
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if err := rows.Scan(&epoch); err != nil {
		return false, err
	}
	return epoch == src.Epoch, rows.Err()
}
