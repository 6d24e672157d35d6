package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Stock buckets (docs/design.md): bucket 0 of a session×prize is its session_stocks row,
// buckets 1..N-1 are stock_buckets rows. A prize without buckets (N = 1) has no
// stock_buckets row and never a transfer, so nothing here runs for it.

// Split divides total units into n buckets: bucket b gets total/n, plus one when b is below
// total mod n. It is deterministic, sums to total exactly, and no two parts differ by more
// than one. n below 1 is treated as 1.
func Split(total, n int) []int {
	if n < 1 {
		n = 1
	}
	out := make([]int, n)
	for b := range out {
		out[b] = total / n
		if b < total%n {
			out[b]++
		}
	}
	return out
}

// Bucket is one bucket's stock row.
type Bucket struct {
	Bucket  int
	Total   int
	Left    int
	Version int64
}

// PrizeStock is a session×prize's stock over all its buckets: the sums every reader of a
// prize's stock (reports, drift, console, admin API) must use once a prize has buckets.
type PrizeStock struct {
	SessionID, PrizeID int64
	Buckets            int // N: 1 for a prize without buckets
	Total              int // the sum of the buckets' totals
	Left               int // the sum of the buckets' lefts
}

type bucketRow struct {
	ID        int64 `gorm:"primaryKey"`
	SessionID int64
	PrizeID   int64
	Bucket    int
	Total     int
	LeftStock int
	Version   int64
	UpdatedAt time.Time
}

func (bucketRow) TableName() string { return "stock_buckets" }

// ErrBucketsFixed is returned by CreateBuckets for a session×prize that already has another
// number of buckets, or whose stock was already touched (an order, a return, an adjustment):
// every user's home bucket depends on N, so N is fixed before the first grab.
var ErrBucketsFixed = errors.New("buckets can only be set on an untouched stock row")

// ErrBucketed is returned by AdjustStock for a session×prize with more than one bucket:
// AdjustStock changes one row, while such a prize's adjustment must move units to or from
// its buckets through the transfers journal (PlanBucketAdjustment, which the admin API calls
// for it instead).
var ErrBucketed = errors.New("a prize with stock buckets is adjusted through the transfers journal, not by AdjustStock")

// CreateBuckets splits a session×prize's stock row into n buckets (Split of its total):
// bucket 0 keeps its share in the session_stocks row, buckets 1..n-1 get stock_buckets rows,
// and the row records n, in one transaction. Asking again for the same n changes nothing;
// n = 1 on a row without buckets changes nothing either.
func (c *Catalog) CreateBuckets(ctx context.Context, sessionID, prizeID int64, n int) error {
	now := c.now().UTC()
	err := c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return createBuckets(tx, now, sessionID, prizeID, n)
	})
	if err != nil {
		return fmt.Errorf("create %d buckets of session %d prize %d: %w", n, sessionID, prizeID, err)
	}
	return nil
}

// createBuckets is CreateBuckets inside the caller's transaction (CreateActivity's, so an
// activity's prizes never exist without their buckets).
func createBuckets(tx *gorm.DB, now time.Time, sessionID, prizeID int64, n int) error {
	if n < 1 {
		return fmt.Errorf("%d buckets, want at least 1", n)
	}
	var row struct {
		ID        int64
		Total     int
		LeftStock int
		Version   int64
		Buckets   int
	}
	if err := tx.Raw(`SELECT id, total, left_stock, version, buckets FROM session_stocks
		WHERE session_id = ? AND prize_id = ? FOR UPDATE`, sessionID, prizeID).Scan(&row).Error; err != nil {
		return err
	}
	if row.ID == 0 {
		return fmt.Errorf("no stock row: %w", gorm.ErrRecordNotFound)
	}
	if row.Buckets == n {
		return nil
	}
	if row.Buckets != 1 || row.LeftStock != row.Total || row.Version != 0 {
		return fmt.Errorf("%d buckets, left %d of %d, version %d: %w", row.Buckets, row.LeftStock, row.Total, row.Version, ErrBucketsFixed)
	}
	parts := Split(row.Total, n)
	rows := make([]bucketRow, 0, n-1)
	for b := 1; b < n; b++ {
		rows = append(rows, bucketRow{SessionID: sessionID, PrizeID: prizeID, Bucket: b, Total: parts[b], LeftStock: parts[b], UpdatedAt: now})
	}
	if err := tx.CreateInBatches(&rows, 500).Error; err != nil {
		return fmt.Errorf("insert bucket rows: %w", err)
	}
	// version stays 0: the row is still untouched as far as preheat and adjust care.
	return tx.Exec(`UPDATE session_stocks SET total = ?, left_stock = ?, buckets = ?, updated_at = ? WHERE id = ?`,
		parts[0], parts[0], n, now, row.ID).Error
}

// Buckets returns a session×prize's buckets in order, bucket 0 (its stock row) first.
func (c *Catalog) Buckets(ctx context.Context, sessionID, prizeID int64) ([]Bucket, error) {
	return readBuckets(c.db.WithContext(ctx), sessionID, prizeID)
}

func readBuckets(db *gorm.DB, sessionID, prizeID int64) ([]Bucket, error) {
	var out []Bucket
	err := db.Raw(`SELECT 0 AS bucket, total, left_stock AS `+"`left`"+`, version FROM session_stocks WHERE session_id = ? AND prize_id = ?
		UNION ALL
		SELECT bucket, total, left_stock, version FROM stock_buckets WHERE session_id = ? AND prize_id = ?
		ORDER BY bucket`, sessionID, prizeID, sessionID, prizeID).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("buckets of session %d prize %d: %w", sessionID, prizeID, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("buckets of session %d prize %d: %w", sessionID, prizeID, gorm.ErrRecordNotFound)
	}
	return out, nil
}

// PrizeStock returns a session×prize's total and left summed over its buckets, in one
// statement (one consistent read). It is a Go query, not a view: a view carries a DEFINER
// that breaks dumps restored under another account on RDS-like servers, needs CREATE VIEW
// beyond what the migration account has elsewhere, and gorm would never write through it.
func (c *Catalog) PrizeStock(ctx context.Context, sessionID, prizeID int64) (PrizeStock, error) {
	out, err := prizeStocks(c.db.WithContext(ctx), "s.session_id = ? AND s.prize_id = ?", sessionID, prizeID)
	if err != nil {
		return PrizeStock{}, fmt.Errorf("prize stock of session %d prize %d: %w", sessionID, prizeID, err)
	}
	if len(out) == 0 {
		return PrizeStock{}, fmt.Errorf("prize stock of session %d prize %d: %w", sessionID, prizeID, gorm.ErrRecordNotFound)
	}
	return out[0], nil
}

// prizeStocks sums the buckets of the session×prizes whose session_stocks row (s) matches
// where, ordered by session and prize.
func prizeStocks(db *gorm.DB, where string, args ...any) ([]PrizeStock, error) {
	var out []PrizeStock
	err := db.Raw(`SELECT s.session_id, s.prize_id, s.buckets,
			s.total + COALESCE(SUM(b.total), 0) AS total, s.left_stock + COALESCE(SUM(b.left_stock), 0) AS `+"`left`"+`
		FROM session_stocks s
		LEFT JOIN stock_buckets b ON b.session_id = s.session_id AND b.prize_id = s.prize_id
		WHERE `+where+`
		GROUP BY s.session_id, s.prize_id, s.buckets, s.total, s.left_stock
		ORDER BY s.session_id, s.prize_id`, args...).Scan(&out).Error
	return out, err
}

// Transfer states, in the order a transfer goes through them.
const (
	TransferPlanned   = "planned"   // journaled; Redis's source not yet known to have given up units
	TransferMoved     = "moved"     // MySQL moved Units from source row to destination row
	TransferDone      = "done"      // Redis's destination got the units
	TransferCancelled = "cancelled" // nothing was taken (the source was not loaded in Redis)
)

// Transfer is one journal entry of bucket_transfers.
type Transfer struct {
	ID                 int64
	SessionID, PrizeID int64
	From, To           int
	Requested          int
	Taken              int // what Redis's source gave up (step 2); set from moved on
	Units              int // what moved in MySQL (step 3), at most Taken
	State              string
	Fence              int64
	SessionEnd         time.Time // when the session ends (the keys' expiry is this plus a grace)
	Buckets            int       // the session×prize's N, which names a bucket's Redis keys
}

type transferRow struct {
	ID         int64 `gorm:"primaryKey"`
	SessionID  int64
	PrizeID    int64
	FromBucket int
	ToBucket   int
	Requested  int
	Taken      *int
	Units      *int
	State      string
	Fence      int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

func (transferRow) TableName() string { return "bucket_transfers" }

func (r transferRow) domain(end time.Time, buckets int) Transfer {
	t := Transfer{ID: r.ID, SessionID: r.SessionID, PrizeID: r.PrizeID, From: r.FromBucket, To: r.ToBucket,
		Requested: r.Requested, State: r.State, Fence: r.Fence, SessionEnd: end.UTC(), Buckets: buckets}
	if r.Taken != nil {
		t.Taken = *r.Taken
	}
	if r.Units != nil {
		t.Units = *r.Units
	}
	return t
}

// ErrTransferState is returned when a journal step finds the transfer in a state that step
// cannot follow (finishing a planned one, cancelling a moved one).
var ErrTransferState = errors.New("transfer is not in the state this step follows")

// PlanTransfer journals a transfer of units from bucket from to bucket to (step 1), under
// the fence f (refused with lease.ErrStale when a newer holder took the lease). Both buckets
// must exist.
func (c *Catalog) PlanTransfer(ctx context.Context, f lease.Fence, sessionID, prizeID int64, from, to, units int) (Transfer, error) {
	if units < 1 || from == to || from < 0 || to < 0 {
		return Transfer{}, fmt.Errorf("plan transfer of %d from bucket %d to %d: invalid", units, from, to)
	}
	now := c.now().UTC()
	var out Transfer
	err := fenced(ctx, c.db, f, func(tx *gorm.DB) error {
		var n int
		if err := tx.Raw(`SELECT buckets FROM session_stocks WHERE session_id = ? AND prize_id = ?`, sessionID, prizeID).Scan(&n).Error; err != nil {
			return err
		}
		if from >= n || to >= n {
			return fmt.Errorf("the session×prize has %d buckets", n)
		}
		row := transferRow{SessionID: sessionID, PrizeID: prizeID, FromBucket: from, ToBucket: to, Requested: units,
			State: TransferPlanned, Fence: f.Number, CreatedAt: now, UpdatedAt: now}
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		end, err := sessionEnd(tx, sessionID)
		out = row.domain(end, n)
		return err
	})
	if err != nil {
		return Transfer{}, fmt.Errorf("plan transfer of %d from bucket %d to %d of session %d prize %d: %w", units, from, to, sessionID, prizeID, err)
	}
	return out, nil
}

func sessionEnd(tx *gorm.DB, sessionID int64) (time.Time, error) {
	var end time.Time
	err := tx.Raw(`SELECT ends_at FROM sessions WHERE id = ?`, sessionID).Row().Scan(&end)
	return end, err
}

// sessionEndAndBuckets is sessionEnd and the session×prize's N.
func sessionEndAndBuckets(tx *gorm.DB, sessionID, prizeID int64) (time.Time, int, error) {
	var end time.Time
	var n int
	err := tx.Raw(`SELECT s.ends_at, ss.buckets FROM sessions s JOIN session_stocks ss ON ss.session_id = s.id
		WHERE s.id = ? AND ss.prize_id = ?`, sessionID, prizeID).Row().Scan(&end, &n)
	return end, n, err
}

// MoveTransfer is step 3: in one transaction under the fence, it moves the units Redis's
// source bucket gave up (taken, step 2) from the source row to the destination row, both
// versions bumped, and journals the transfer moved. It moves min(taken, the source row's
// left): MySQL's left of a bucket is at least Redis's (a unit leaves Redis first and
// reaches it last), unless Redis kept admissions a failover lost; what Redis took beyond
// MySQL's left was never there and simply stays gone (drift would have removed it).
// A transfer already past planned is returned as it is: the step is done, and repeating it
// would move the units twice. It returns the destination row's version after the move.
// A stock adjustment has one end Outside: a raise adds taken (its request: nothing is taken
// in Redis) to its bucket, a cut takes min(taken, left) from its bucket and returns that
// bucket's version.
func (c *Catalog) MoveTransfer(ctx context.Context, f lease.Fence, id int64, taken int) (Transfer, int64, error) {
	if taken < 0 {
		return Transfer{}, 0, fmt.Errorf("move transfer %d: taken %d", id, taken)
	}
	now := c.now().UTC()
	var out Transfer
	var toVersion int64
	err := fenced(ctx, c.db, f, func(tx *gorm.DB) error {
		var row transferRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id), &row); err != nil {
			return err
		}
		end, n, err := sessionEndAndBuckets(tx, row.SessionID, row.PrizeID)
		if err != nil {
			return err
		}
		// The version returned is the receiving bucket's, or for a cut (to Outside) the
		// bucket's that gave the units up.
		versionOf := row.ToBucket
		if versionOf == Outside {
			versionOf = row.FromBucket
		}
		if row.State != TransferPlanned {
			out = row.domain(end, n)
			if row.State == TransferCancelled {
				return fmt.Errorf("%s: %w", row.State, ErrTransferState)
			}
			toVersion, err = bucketVersion(tx, row.SessionID, row.PrizeID, versionOf)
			return err
		}
		// Lock both rows in bucket order, bucket 0 (session_stocks) first, so two transfers
		// of one prize never wait for each other in opposite orders. A stock adjustment
		// (one end Outside) locks its one bucket.
		lefts := map[int]int{}
		for _, b := range []int{min(row.FromBucket, row.ToBucket), max(row.FromBucket, row.ToBucket)} {
			if b == Outside {
				continue
			}
			left, err := lockBucket(tx, row.SessionID, row.PrizeID, b)
			if err != nil {
				return err
			}
			lefts[b] = left
		}
		// A raise adds what was asked (nothing to take in Redis: taken is the request);
		// otherwise the source row gives what Redis gave up, at most its left.
		units := taken
		if row.FromBucket != Outside {
			units = min(taken, lefts[row.FromBucket])
			if err := addToBucket(tx, row.SessionID, row.PrizeID, row.FromBucket, -units, now); err != nil {
				return err
			}
		}
		if row.ToBucket != Outside {
			if err := addToBucket(tx, row.SessionID, row.PrizeID, row.ToBucket, units, now); err != nil {
				return err
			}
		}
		if err := tx.Exec(`UPDATE bucket_transfers SET state = ?, taken = ?, units = ?, fence = ?, updated_at = ? WHERE id = ?`,
			TransferMoved, taken, units, f.Number, now, id).Error; err != nil {
			return err
		}
		if row.ToBucket == Outside && units < row.Requested {
			if err := auditShortCut(tx, row, units, now); err != nil {
				return err
			}
		}
		row.State, row.Taken, row.Units, row.Fence = TransferMoved, &taken, &units, f.Number
		out = row.domain(end, n)
		toVersion, err = bucketVersion(tx, row.SessionID, row.PrizeID, versionOf)
		return err
	})
	if err != nil {
		return Transfer{}, 0, fmt.Errorf("move transfer %d: %w", id, err)
	}
	return out, toVersion, nil
}

// auditShortCut records, with the move, that a planned cut took fewer units than the admin
// API's 202 and the adjustment's audit row said it would: grabs admitted between the plan and
// the take keep theirs. The audit log is where the operator who asked reads what happened.
func auditShortCut(tx *gorm.DB, row transferRow, units int, now time.Time) error {
	sid, pid, asked, cut := row.SessionID, row.PrizeID, int64(row.Requested), int64(units)
	err := tx.Create(&auditRow{At: now, Actor: "reconciler", Action: "adjust_stock_short", SessionID: &sid, PrizeID: &pid,
		BeforeValue: &asked, AfterValue: &cut,
		Detail: fmt.Sprintf("transfer %d: bucket %d gave up %d of the %d units planned; the rest were admitted before the cut reached Redis",
			row.ID, row.FromBucket, units, row.Requested)}).Error
	if err != nil {
		return fmt.Errorf("audit the short cut of transfer %d: %w", row.ID, err)
	}
	return nil
}

// lockBucket locks bucket b's row and returns its left.
func lockBucket(tx *gorm.DB, sessionID, prizeID int64, b int) (int, error) {
	q := `SELECT left_stock FROM stock_buckets WHERE session_id = ? AND prize_id = ? AND bucket = ? FOR UPDATE`
	args := []any{sessionID, prizeID, b}
	if b == 0 {
		q, args = `SELECT left_stock FROM session_stocks WHERE session_id = ? AND prize_id = ? FOR UPDATE`, args[:2]
	}
	var left int
	if err := tx.Raw(q, args...).Row().Scan(&left); err != nil {
		return 0, fmt.Errorf("lock bucket %d: %w", b, err)
	}
	return left, nil
}

// addToBucket adds delta to bucket b's total and left and bumps its version (the version
// is what a preheat's revision compares, and what the consumer's conditional update
// re-reads after a conflict).
func addToBucket(tx *gorm.DB, sessionID, prizeID int64, b, delta int, now time.Time) error {
	table, where, args := "stock_buckets", "session_id = ? AND prize_id = ? AND bucket = ?", []any{sessionID, prizeID, b}
	if b == 0 {
		table, where, args = "session_stocks", "session_id = ? AND prize_id = ?", args[:2]
	}
	res := tx.Exec(`UPDATE `+table+` SET total = total + ?, left_stock = left_stock + ?, version = version + 1, updated_at = ? WHERE `+where,
		append([]any{delta, delta, now}, args...)...)
	if res.Error != nil {
		return fmt.Errorf("bucket %d by %d: %w", b, delta, res.Error)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("bucket %d: %w", b, gorm.ErrRecordNotFound)
	}
	return nil
}

func bucketVersion(tx *gorm.DB, sessionID, prizeID int64, b int) (int64, error) {
	q := `SELECT version FROM stock_buckets WHERE session_id = ? AND prize_id = ? AND bucket = ?`
	args := []any{sessionID, prizeID, b}
	if b == 0 {
		q, args = `SELECT version FROM session_stocks WHERE session_id = ? AND prize_id = ?`, args[:2]
	}
	var v int64
	if err := tx.Raw(q, args...).Row().Scan(&v); err != nil {
		return 0, fmt.Errorf("version of bucket %d: %w", b, err)
	}
	return v, nil
}

// FinishTransfer is step 5: a moved transfer becomes done. Repeating it is harmless.
func (c *Catalog) FinishTransfer(ctx context.Context, f lease.Fence, id int64) error {
	return c.advance(ctx, f, id, TransferMoved, TransferDone)
}

// CancelTransfer ends a planned transfer whose source took nothing because it was not
// loaded in Redis (the next preheat or rebuild loads it from its row, which still holds
// the units). Repeating it is harmless.
func (c *Catalog) CancelTransfer(ctx context.Context, f lease.Fence, id int64) error {
	return c.advance(ctx, f, id, TransferPlanned, TransferCancelled)
}

func (c *Catalog) advance(ctx context.Context, f lease.Fence, id int64, from, to string) error {
	now := c.now().UTC()
	err := fenced(ctx, c.db, f, func(tx *gorm.DB) error {
		var state string
		if err := tx.Raw(`SELECT state FROM bucket_transfers WHERE id = ? FOR UPDATE`, id).Row().Scan(&state); err != nil {
			return err
		}
		switch state {
		case to:
			return nil
		case from:
			return tx.Exec(`UPDATE bucket_transfers SET state = ?, fence = ?, updated_at = ? WHERE id = ?`, to, f.Number, now, id).Error
		}
		return fmt.Errorf("%s: %w", state, ErrTransferState)
	})
	if err != nil {
		return fmt.Errorf("transfer %d %s -> %s: %w", id, from, to, err)
	}
	return nil
}

// BucketedStocks returns the prize stock (PrizeStock) of every session×prize with buckets
// (N > 1) of the given sessions, in one statement, ordered by session and prize: the
// rebalance loop's list of what it may move units in. Prizes without buckets are left out.
func (c *Catalog) BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]PrizeStock, error) {
	if len(sessionIDs) == 0 {
		return nil, nil
	}
	out, err := prizeStocks(c.db.WithContext(ctx), "s.session_id IN ? AND s.buckets > 1", sessionIDs)
	if err != nil {
		return nil, fmt.Errorf("bucketed stocks of %d sessions: %w", len(sessionIDs), err)
	}
	return out, nil
}

// UnfinishedTransfers returns every transfer not done nor cancelled, oldest first: what a
// new lease holder resumes before it plans anything.
func (c *Catalog) UnfinishedTransfers(ctx context.Context) ([]Transfer, error) {
	return c.transfers(ctx, "t.state IN ?", []string{TransferPlanned, TransferMoved})
}

// UnfinishedTransfersOf returns the transfers of one session×prize not done nor cancelled,
// oldest first: the operator's view of the units in flight between its buckets.
func (c *Catalog) UnfinishedTransfersOf(ctx context.Context, sessionID, prizeID int64) ([]Transfer, error) {
	return c.transfers(ctx, "t.session_id = ? AND t.prize_id = ? AND t.state IN ?", sessionID, prizeID, []string{TransferPlanned, TransferMoved})
}

// Transfers returns every transfer of a session×prize, oldest first (rebuild and preheat
// replay the recorded ones into the buckets' Redis keys).
func (c *Catalog) Transfers(ctx context.Context, sessionID, prizeID int64) ([]Transfer, error) {
	return c.transfers(ctx, "t.session_id = ? AND t.prize_id = ?", sessionID, prizeID)
}

// Transfer returns one journal entry.
func (c *Catalog) Transfer(ctx context.Context, id int64) (Transfer, error) {
	out, err := c.transfers(ctx, "t.id = ?", id)
	if err != nil {
		return Transfer{}, err
	}
	if len(out) == 0 {
		return Transfer{}, fmt.Errorf("transfer %d: %w", id, gorm.ErrRecordNotFound)
	}
	return out[0], nil
}

func (c *Catalog) transfers(ctx context.Context, where string, args ...any) ([]Transfer, error) {
	var rows []transferRow
	var ends []time.Time
	var ns []int
	res, err := c.db.WithContext(ctx).Raw(`SELECT t.id, t.session_id, t.prize_id, t.from_bucket, t.to_bucket, t.requested, t.taken, t.units,
		t.state, t.fence, t.created_at, t.updated_at, s.ends_at, ss.buckets FROM bucket_transfers t JOIN sessions s ON s.id = t.session_id
		JOIN session_stocks ss ON ss.session_id = t.session_id AND ss.prize_id = t.prize_id
		WHERE `+where+` ORDER BY t.id`, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("bucket transfers: %w", err)
	}
	defer res.Close()
	for res.Next() {
		var r transferRow
		var end time.Time
		var n int
		if err := res.Scan(&r.ID, &r.SessionID, &r.PrizeID, &r.FromBucket, &r.ToBucket, &r.Requested, &r.Taken, &r.Units,
			&r.State, &r.Fence, &r.CreatedAt, &r.UpdatedAt, &end, &n); err != nil {
			return nil, fmt.Errorf("bucket transfers: %w", err)
		}
		rows, ends, ns = append(rows, r), append(ends, end), append(ns, n)
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("bucket transfers: %w", err)
	}
	out := make([]Transfer, len(rows))
	for i, r := range rows {
		out[i] = r.domain(ends[i], ns[i])
	}
	return out, nil
}

// Ledger returns, per bucket of a session×prize (index = bucket), what its Redis keys must
// record of the journal once every transfer past planned is given: preheat, rebuild and
// drift of a bucket write or compare it. A planned transfer
// counts nowhere: after a Redis loss its take restarts (its units are still in the source
// row); a moved one counts as given, since a rebuilt destination loads its row, which
// already holds the units, and must not get them again.
func (c *Catalog) Ledger(ctx context.Context, sessionID, prizeID int64, n int) ([]seckill.BucketLedger, error) {
	all, err := c.Transfers(ctx, sessionID, prizeID)
	if err != nil {
		return nil, err
	}
	out := make([]seckill.BucketLedger, n)
	for b := range out {
		out[b] = seckill.BucketLedger{Transfers: map[int64]int{}}
	}
	for _, t := range all {
		if t.State != TransferMoved && t.State != TransferDone {
			continue
		}
		if t.From >= n || t.To >= n {
			return nil, fmt.Errorf("ledger of session %d prize %d: transfer %d names bucket %d or %d of %d", sessionID, prizeID, t.ID, t.From, t.To, n)
		}
		switch {
		case t.To == Outside:
			// A cut: the take counts what it took as both sent and received (nothing is on
			// its way anywhere, and the counts mark the keys as live for load.lua).
			out[t.From].Sent += t.Taken
			out[t.From].Received += t.Taken
			out[t.From].Transfers[t.ID] = t.Taken
			continue
		case t.From == Outside:
			// A raise: nothing was sent, so nothing is received; the id records the give.
			out[t.To].Transfers[t.ID] = t.Units
			continue
		}
		out[t.From].Sent += t.Taken
		out[t.From].Transfers[t.ID] = t.Taken
		out[t.To].Received += t.Taken
		out[t.To].Transfers[t.ID] = t.Units
	}
	return out, nil
}
