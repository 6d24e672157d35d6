package store

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// ErrNoStockRow is returned for grabs on a session×prize the database does not know: no
// retry can help, the events are poison.
var ErrNoStockRow = errors.New("no stock row for this session and prize")

// ErrNoBucket is returned for grabs of a stock bucket the session×prize does not have (a
// bucket at or above its N, or below 0): a corrupt or forged event, poison like an unknown
// session×prize.
var ErrNoBucket = errors.New("no such stock bucket for this session and prize")

// ErrMixedBuckets is returned when one Persist call is given grabs of several stock
// buckets: the caller must group by session×prize×bucket (writepath.GroupGrabs does).
var ErrMixedBuckets = errors.New("grabs of several stock buckets in one batch")

// Outcome is what became of one grab.
type Outcome struct {
	Grab    seckill.Grab
	OrderID int64
	Status  seckill.OrderStatus
	Reason  seckill.Reason
	Before  bool // the order existed before this call (a redelivery)
}

// PersistResult is what Persist did for one session×prize batch.
type PersistResult struct {
	Outcomes  []Outcome // one per distinct request id, in event order
	Succeeded int       // new succeeded orders
	Rejected  int       // new rejected orders
	Existing  int       // redelivered request ids that already had an order
	Version   int64     // the stock row's version after the update
	// Bucket is the stock bucket the grabs were persisted in (docs/design.md): its row was
	// the one updated, and its Redis keys hold the grabs' reservations.
	Bucket int
	// Buckets is the session×prize's N (its stock row's), which names the bucket's keys.
	Buckets int
	// Events are the new orders' creation events when the transaction wrote them under a
	// current GrabSource claim: the caller publishes them from memory after the commit. Nil
	// otherwise (no source, or its claim was taken over): the relay publishes them.
	Events []OutboxEvent
}

// Persist turns grabs of one session×prize and stock bucket into orders in one transaction:
//   - request ids that already have an order are skipped (redelivery is normal);
//   - the stock row's left_stock and version are read: the bucket's row (docs/design.md),
//     which for bucket 0, and so for every prize without buckets, is session_stocks, and
//     for bucket b ≥ 1 its stock_buckets row; the per-user limit is always session_stocks'
//     (prize-wide, like the slots);
//   - new grabs are accepted in event order up to left_stock, each taking a per-user slot;
//     a user at the per-user limit gets a rejected order (reason limit), the rest beyond
//     the stock a rejected order (reason sold_out);
//   - one conditional UPDATE takes the accepted count off left_stock if the version is
//     still the one read; 0 rows matched is seckill.ErrConflict;
//   - one multi-row INSERT stores the orders, each with its order event still to publish:
//     by the relay (the orders table is its outbox), or, under PersistFrom's claim, by the
//     consumer from memory after the commit.
//
// The UPDATE runs before the INSERT on purpose: it takes the stock row's exclusive lock
// first, so the orders' foreign-key check (a shared lock on the same row) cannot deadlock
// with a concurrent writer upgrading from shared to exclusive.
//
// Every call is one fresh transaction: a retry after a conflict re-reads the version.
func (o *Orders) Persist(ctx context.Context, sessionID, prizeID int64, grabs []seckill.Grab, now time.Time) (PersistResult, error) {
	return o.PersistFrom(ctx, sessionID, prizeID, grabs, now, nil)
}

// PersistFrom is Persist for a grab partition's batch (src, nil for none). When src's claim
// is still the partition's, read under a shared lock in the same transaction, the orders
// carry the partition and src.Seq and their events come back in the result for the caller
// to publish; otherwise they go to the relay like any other path's.
func (o *Orders) PersistFrom(ctx context.Context, sessionID, prizeID int64, grabs []seckill.Grab, now time.Time, src *GrabSource) (PersistResult, error) {
	grabs = dedupe(grabs)
	bucket, err := bucketOf(grabs)
	if err != nil {
		return PersistResult{}, fmt.Errorf("session %d prize %d: %w", sessionID, prizeID, err)
	}
	var res PersistResult
	err = o.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res = PersistResult{}
		existing, err := existingOrders(tx, grabs)
		if err != nil {
			return err
		}
		var st stockRow
		if err := first(tx.Where("session_id = ? AND prize_id = ?", sessionID, prizeID), &st); err != nil {
			if errors.Is(err, seckill.ErrNotFound) {
				return fmt.Errorf("session %d prize %d: %w", sessionID, prizeID, ErrNoStockRow)
			}
			return fmt.Errorf("read stock: %w", err)
		}
		// The row the units come from: bucket 0's is the stock row just read, so a prize
		// without buckets reads and writes exactly what it always did.
		target := bucketTarget{table: "session_stocks", id: st.ID, left: st.LeftStock, version: st.Version}
		if bucket != 0 {
			if target, err = readBucketTarget(tx, sessionID, prizeID, bucket, st.Buckets); err != nil {
				return err
			}
		}
		if o.afterRead != nil {
			o.afterRead(ctx, sessionID, prizeID)
		}
		if st.ArchivedAt != nil {
			// Orders of this session×prize may have moved to orders_archive: a replayed grab
			// must find its order there, and the per-user slots count the archived ones too.
			// Read in this transaction's snapshot, the one the stamp was read in, so an order
			// is seen in exactly one of the two tables.
			if err := addArchived(tx, grabs, existing); err != nil {
				return err
			}
		}
		var fresh []seckill.Grab
		for _, g := range grabs {
			if _, ok := existing[g.RequestID]; !ok {
				fresh = append(fresh, g)
			}
		}
		held, err := userSlots(tx, sessionID, prizeID, fresh, st.ArchivedAt != nil)
		if err != nil {
			return err
		}

		rows := make([]orderRow, 0, len(fresh))
		accepted := 0
		for _, g := range fresh {
			row := orderRow{RequestID: g.RequestID, UserID: g.UserID, SessionID: sessionID, PrizeID: prizeID, Bucket: bucket,
				PerUserLimit: st.PerUserLimit, AdmittedAt: micro(g.AdmittedAt), CreatedAt: micro(now), TraceContext: traceContext(g.TraceParent)}
			switch {
			case len(held[g.UserID]) >= st.PerUserLimit:
				row.Status, row.Reason = string(seckill.OrderRejected), string(seckill.ReasonLimit)
			case accepted >= target.left:
				row.Status, row.Reason = string(seckill.OrderRejected), string(seckill.ReasonSoldOut)
			default:
				slot := freeSlot(held[g.UserID])
				held[g.UserID] = append(held[g.UserID], slot)
				row.Status, row.Slot = string(seckill.OrderSucceeded), &slot
				accepted++
			}
			rows = append(rows, row)
		}

		res.Version, res.Bucket, res.Buckets = target.version, bucket, st.Buckets
		if accepted > 0 {
			// Each bucket's row is its own hot row: writers of different buckets never
			// conflict here (the per-user slots they insert are prize-wide, and a unique
			// index, not this row, settles a race on one user's slot).
			upd := tx.Exec(`UPDATE `+target.table+` SET left_stock = left_stock - ?, version = version + 1, updated_at = ?
				WHERE id = ? AND version = ? AND left_stock >= ?`, accepted, now.UTC(), target.id, target.version, accepted)
			if upd.Error != nil {
				return fmt.Errorf("update stock: %w", upd.Error)
			}
			// clientFoundRows=true: RowsAffected counts matched rows, so 0 means the version
			// moved (or the stock shrank) since the read: a conflict, never "nothing to do".
			if upd.RowsAffected != 1 {
				return fmt.Errorf("session %d prize %d bucket %d version %d: %w", sessionID, prizeID, bucket, target.version, seckill.ErrConflict)
			}
			res.Version = target.version + 1
		}
		// Orders of this very batch that an earlier attempt committed without its caller
		// hearing so (a connection cut during COMMIT): their events were never published, and
		// the batch's progress write would record them as if they were.
		unconfirmed := unconfirmedOf(existing, src)
		if len(rows) > 0 || len(unconfirmed) > 0 {
			claimed, err := fenceSource(tx, src)
			if err != nil {
				return err
			}
			if len(rows) > 0 {
				if claimed {
					for i := range rows {
						rows[i].GrabPartition, rows[i].GrabSeq = &src.Partition, &src.Seq
					}
				}
				if err := tx.Create(&rows).Error; err != nil {
					return fmt.Errorf("insert orders: %w", err)
				}
				// Ids come from a re-read rather than from the auto-increment arithmetic gorm
				// assumes, which MySQL 8's interleaved auto-increment locking does not guarantee.
				ids, err := orderIDs(tx, rows)
				if err != nil {
					return err
				}
				for i := range rows {
					rows[i].ID = ids[rows[i].RequestID]
				}
				if err := saveCases(tx, admittedRejected(rows)); err != nil {
					return err
				}
			}
			if claimed {
				res.Events = make([]OutboxEvent, 0, len(unconfirmed)+len(rows))
				for _, r := range append(unconfirmed, rows...) {
					ev, err := creationEvent(r)
					if err != nil {
						return err
					}
					res.Events = append(res.Events, ev)
				}
			}
		}

		byRID := make(map[string]orderRow, len(rows))
		for _, r := range rows {
			byRID[r.RequestID] = r
		}
		for _, g := range grabs {
			if e, ok := existing[g.RequestID]; ok {
				res.Existing++
				res.Outcomes = append(res.Outcomes, Outcome{Grab: g, OrderID: e.ID, Status: seckill.OrderStatus(e.Status),
					Reason: seckill.Reason(e.Reason), Before: true})
				continue
			}
			r := byRID[g.RequestID]
			if r.Status == string(seckill.OrderSucceeded) {
				res.Succeeded++
			} else {
				res.Rejected++
			}
			res.Outcomes = append(res.Outcomes, Outcome{Grab: g, OrderID: r.ID, Status: seckill.OrderStatus(r.Status),
				Reason: seckill.Reason(r.Reason)})
		}
		return nil
	})
	if err != nil {
		return PersistResult{}, err
	}
	return res, nil
}

// bucketTarget is the stock row a Persist call takes units from.
type bucketTarget struct {
	table   string // session_stocks (bucket 0) or stock_buckets
	id      int64
	left    int
	version int64
}

// bucketOf returns the one stock bucket of grabs (0 for none).
func bucketOf(grabs []seckill.Grab) (int, error) {
	if len(grabs) == 0 {
		return 0, nil
	}
	b := grabs[0].Bucket
	for _, g := range grabs[1:] {
		if g.Bucket != b {
			return 0, fmt.Errorf("buckets %d and %d: %w", b, g.Bucket, ErrMixedBuckets)
		}
	}
	return b, nil
}

// readBucketTarget reads bucket b's stock_buckets row of a session×prize with n buckets.
// A bucket outside 1..n-1 is ErrNoBucket: the event is corrupt or forged, since a gateway
// admits a user only in their home bucket, below n.
func readBucketTarget(tx *gorm.DB, sessionID, prizeID int64, b, n int) (bucketTarget, error) {
	if b < 0 || b >= n {
		return bucketTarget{}, fmt.Errorf("session %d prize %d bucket %d of %d: %w", sessionID, prizeID, b, n, ErrNoBucket)
	}
	var row bucketRow
	if err := first(tx.Where("session_id = ? AND prize_id = ? AND bucket = ?", sessionID, prizeID, b), &row); err != nil {
		if errors.Is(err, seckill.ErrNotFound) {
			return bucketTarget{}, fmt.Errorf("session %d prize %d bucket %d of %d: %w", sessionID, prizeID, b, n, ErrNoBucket)
		}
		return bucketTarget{}, fmt.Errorf("read stock bucket %d: %w", b, err)
	}
	return bucketTarget{table: "stock_buckets", id: row.ID, left: row.LeftStock, version: row.Version}, nil
}

// dedupe keeps the first grab of each request id, in order.
func dedupe(grabs []seckill.Grab) []seckill.Grab {
	seen := make(map[string]bool, len(grabs))
	out := grabs[:0:0]
	for _, g := range grabs {
		if !seen[g.RequestID] {
			seen[g.RequestID] = true
			out = append(out, g)
		}
	}
	return out
}

func requestIDs(grabs []seckill.Grab) []string {
	ids := make([]string, len(grabs))
	for i, g := range grabs {
		ids[i] = g.RequestID
	}
	return ids
}

func existingOrders(tx *gorm.DB, grabs []seckill.Grab) (map[string]orderRow, error) {
	out := map[string]orderRow{}
	if len(grabs) == 0 {
		return out, nil
	}
	var rows []orderRow
	if err := tx.Where("request_id IN ?", requestIDs(grabs)).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read existing orders: %w", err)
	}
	for _, r := range rows {
		out[r.RequestID] = r
	}
	return out, nil
}

// micro returns t in UTC to the microsecond, what DATETIME(6) stores: the event published from
// memory must carry the times the database has, which the relay and a recovery read back
// (MySQL 8 would round a finer time, MariaDB truncate it).
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// unconfirmedOf returns the orders of existing that src's batch itself wrote and whose
// events are not published: stored with src's partition and sequence number, not stamped.
// Only the batch's own retry finds any (a later batch has a higher sequence number, and a
// new holder of the partition recovers them before its first batch). Ordered by id, as the
// batch wrote them.
func unconfirmedOf(existing map[string]orderRow, src *GrabSource) []orderRow {
	if src == nil {
		return nil
	}
	var out []orderRow
	for _, r := range existing {
		if r.GrabPartition != nil && *r.GrabPartition == src.Partition && r.GrabSeq != nil && *r.GrabSeq == src.Seq &&
			r.EventPublishedAt == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b orderRow) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// addArchived adds to existing the archived orders of grabs' request ids.
func addArchived(tx *gorm.DB, grabs []seckill.Grab, existing map[string]orderRow) error {
	var missing []string
	for _, g := range grabs {
		if _, ok := existing[g.RequestID]; !ok {
			missing = append(missing, g.RequestID)
		}
	}
	rows, err := archivedOrders(tx, missing)
	if err != nil {
		return err
	}
	for _, r := range rows {
		existing[r.RequestID] = r
	}
	return nil
}

// userSlots returns the per-user slots each user of grabs already holds: those of their
// succeeded orders, and of cancelled ones that kept theirs (an activity without re-grab). A
// cancellation that released its slot leaves a gap, so a new order takes the lowest free
// slot (freeSlot), not count+1, which may be taken. The query reads the unique slot index
// alone (session, prize, user, slot).
func userSlots(tx *gorm.DB, sessionID, prizeID int64, grabs []seckill.Grab, archived bool) (map[string][]int, error) {
	out := map[string][]int{}
	if len(grabs) == 0 {
		return out, nil
	}
	users := make([]string, 0, len(grabs))
	seen := map[string]bool{}
	for _, g := range grabs {
		if !seen[g.UserID] {
			seen[g.UserID] = true
			users = append(users, g.UserID)
		}
	}
	var rows []struct {
		UserID string
		Slot   int
	}
	query := `SELECT user_id, slot FROM orders
		WHERE session_id = ? AND prize_id = ? AND user_id IN ? AND slot IS NOT NULL`
	args := []any{sessionID, prizeID, users}
	if archived {
		query += ` UNION ALL SELECT user_id, slot FROM orders_archive
		WHERE session_id = ? AND prize_id = ? AND user_id IN ? AND slot IS NOT NULL`
		args = append(args, sessionID, prizeID, users)
	}
	err := tx.Raw(query, args...).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read per-user slots: %w", err)
	}
	for _, r := range rows {
		out[r.UserID] = append(out[r.UserID], r.Slot)
	}
	return out, nil
}

// freeSlot returns the lowest slot from 1 not in held.
func freeSlot(held []int) int {
	for s := 1; ; s++ {
		taken := false
		for _, h := range held {
			if h == s {
				taken = true
				break
			}
		}
		if !taken {
			return s
		}
	}
}

func orderIDs(tx *gorm.DB, rows []orderRow) (map[string]int64, error) {
	rids := make([]string, len(rows))
	for i, r := range rows {
		rids[i] = r.RequestID
	}
	var got []struct {
		ID        int64
		RequestID string
	}
	if err := tx.Raw("SELECT id, request_id FROM orders WHERE request_id IN ?", rids).Scan(&got).Error; err != nil {
		return nil, fmt.Errorf("read order ids: %w", err)
	}
	out := make(map[string]int64, len(got))
	for _, g := range got {
		out[g.RequestID] = g.ID
	}
	return out, nil
}

// PersistOne is the naive strategy the batched path is measured against: one transaction,
// one conditional UPDATE and one INSERT per order (no outbox). Benchmarks and the hot-row
// comparison use it; the consumer does not.
func (o *Orders) PersistOne(ctx context.Context, g seckill.Grab, now time.Time) (bool, error) {
	ok := false
	err := o.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var st stockRow
		if err := first(tx.Where("session_id = ? AND prize_id = ?", g.SessionID, g.PrizeID), &st); err != nil {
			return err
		}
		if st.LeftStock < 1 {
			return nil
		}
		upd := tx.Exec(`UPDATE session_stocks SET left_stock = left_stock - 1, version = version + 1
			WHERE id = ? AND version = ? AND left_stock >= 1`, st.ID, st.Version)
		if upd.Error != nil {
			return upd.Error
		}
		if upd.RowsAffected != 1 {
			return seckill.ErrConflict
		}
		slot := 1
		ok = true
		return tx.Create(&orderRow{RequestID: g.RequestID, UserID: g.UserID, SessionID: g.SessionID, PrizeID: g.PrizeID,
			Status: string(seckill.OrderSucceeded), PerUserLimit: st.PerUserLimit, Slot: &slot,
			AdmittedAt: g.AdmittedAt, CreatedAt: now}).Error
	})
	return ok, err
}

// IsUnavailable reports whether err means MySQL could not be reached (as opposed to a
// conflict or a bad batch): the caller should wait and retry without giving up.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		// 1053 server shutdown, 1927 connection killed, 2006/2013 gone away / lost; and a
		// server that cannot take writes for now: 1040 too many connections, 1290 running
		// with --read-only (or another option that forbids the statement), 1836 read-only
		// mode (a primary demoted during a failover). Retrying later is right for all.
		switch me.Number {
		case 1040, 1053, 1290, 1836, 1927, 2006, 2013:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}

// IsTransient reports a contention error worth retrying in a new transaction: an
// optimistic-lock conflict, a deadlock (1213) or a lock wait timeout (1205).
func IsTransient(err error) bool {
	if errors.Is(err, seckill.ErrConflict) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// admittedRejected returns an exception case per rejected order: every grab event was
// admitted by Redis, so a rejection here means Redis and MySQL disagreed (Redis lost writes
// in a failover, or was given more stock than MySQL). The order row is the evidence; the
// case is written in the order's own transaction, so it cannot be lost between the two.
func admittedRejected(rows []orderRow) []exceptionRow {
	var out []exceptionRow
	for _, r := range rows {
		if r.Status != string(seckill.OrderRejected) {
			continue
		}
		out = append(out, exceptionRow{Kind: seckill.CaseAdmittedRejected, RequestID: r.RequestID, UserID: r.UserID,
			SessionID: &r.SessionID, PrizeID: &r.PrizeID, FirstSeenAt: r.CreatedAt, LastSeenAt: r.CreatedAt, Seen: 1,
			Detail: fmt.Sprintf("admitted by redis, rejected by mysql (%s): order %d", r.Reason, r.ID)})
	}
	return out
}
