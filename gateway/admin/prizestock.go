package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// A prize with stock buckets (docs/design.md) has N rows and N sets of Redis keys; its
// session_stocks row and its own keys are bucket 0's share only. Every view of the admin API
// that shows a prize's stock shows the sums over its buckets, and the prize's page shows each
// bucket.

// bucketedCatalog sums a prize's buckets in MySQL.
type bucketedCatalog interface {
	BucketedStocks(ctx context.Context, sessionIDs ...int64) ([]store.PrizeStock, error)
}

// prizeFigures turns, for each prize with buckets among stocks, its row's total, left and N
// into the prize's (Catalog.BucketedStocks: one statement for all of them), then reads every
// prize's Redis snapshot summed over its buckets (Gate.PrizeSnapshots: one round trip for
// all), index-aligned with stocks. MySQL is read first so that the buckets read in Redis are
// the N its sums are over. When no prize has buckets no query is made: a deployment without
// buckets reads what it always read.
func prizeFigures(ctx context.Context, c bucketedCatalog, g adminGate, stocks []seckill.Stock) ([]stock.Snapshot, error) {
	if err := sumBucketRows(ctx, c, stocks); err != nil {
		return nil, err
	}
	return g.PrizeSnapshots(ctx, stocks)
}

// sumBucketRows turns the total, left and N of each prize with buckets among stocks into
// the prize's; prizes without buckets are left as they are.
func sumBucketRows(ctx context.Context, c bucketedCatalog, stocks []seckill.Stock) error {
	var ids []int64
	for _, st := range stocks {
		if st.Buckets > 1 && (len(ids) == 0 || ids[len(ids)-1] != st.SessionID) {
			ids = append(ids, st.SessionID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sums, err := c.BucketedStocks(ctx, ids...)
	if err != nil {
		return err
	}
	byPrize := make(map[seckill.SessionPrize]store.PrizeStock, len(sums))
	for _, p := range sums {
		byPrize[seckill.SessionPrize{Session: p.SessionID, Prize: p.PrizeID}] = p
	}
	for i, st := range stocks {
		if p, ok := byPrize[st.SessionPrize()]; ok {
			stocks[i].Total, stocks[i].Left, stocks[i].Buckets = p.Total, p.Left, p.Buckets
		}
	}
	return nil
}

// prizePageCatalog is what the prize's page reads of MySQL.
type prizePageCatalog interface {
	Session(ctx context.Context, id int64) (seckill.Session, error)
	Activity(ctx context.Context, id int64) (seckill.Activity, error)
	PrizeStock(ctx context.Context, sessionID, prizeID int64) (store.PrizeStock, error)
	Buckets(ctx context.Context, sessionID, prizeID int64) ([]store.Bucket, error)
	UnfinishedTransfersOf(ctx context.Context, sessionID, prizeID int64) ([]store.Transfer, error)
}

// prizePageGate is what the prize's page reads of Redis.
type prizePageGate interface {
	BucketDetails(ctx context.Context, id seckill.SessionPrize, n int) ([]stock.BucketDetail, error)
}

// prizePage answers GET /admin/v1/sessions/{id}/prizes/{prize}: one session×prize's stock,
// summed over its buckets, and each bucket side by side in MySQL and Redis with the
// transfers between them not finished yet.
type prizePage struct {
	catalog prizePageCatalog
	gate    prizePageGate
	now     func() time.Time
	fail    func(w http.ResponseWriter, r *http.Request, err error)
}

type bucketView struct {
	Bucket int                `json:"bucket"`
	DB     dbStockView        `json:"db"`
	Redis  stock.BucketDetail `json:"redis"`
}

type transferView struct {
	ID        int64  `json:"id"`
	From      int    `json:"from"`
	To        int    `json:"to"`
	Requested int    `json:"requested"`
	Taken     int    `json:"taken"`
	Units     int    `json:"units"`
	State     string `json:"state"`
	Fence     int64  `json:"fence"`
}

type prizePageView struct {
	SessionID    int64  `json:"session_id"`
	PrizeID      int64  `json:"prize_id"`
	Name         string `json:"name"`
	ActivityID   int64  `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	State        string `json:"state"`
	Buckets      int    `json:"buckets"`
	// DB is the prize's total and left summed over its buckets (Catalog.PrizeStock); Redis
	// the sum of its buckets' snapshots (stock.SumSnapshots).
	DB    dbStockView    `json:"db"`
	Redis stock.Snapshot `json:"redis"`
	// InFlight is what the buckets' transfers took and have not given yet (stock.InFlight
	// over the loaded buckets): units in no bucket's Redis left.
	InFlight int64 `json:"in_flight"`
	// BucketRows lists every bucket, one for a prize without buckets.
	BucketRows []bucketView   `json:"bucket_rows"`
	Transfers  []transferView `json:"transfers"`
}

func (p *prizePage) register(a *API, mux *http.ServeMux) {
	a.handle(mux, "GET /admin/v1/sessions/{id}/prizes/{prize}", p.serve)
}

func (p *prizePage) serve(w http.ResponseWriter, r *http.Request) {
	sid, pid, ok := sessionPrizePath(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	s, err := p.catalog.Session(ctx, sid)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	act, err := p.catalog.Activity(ctx, s.ActivityID)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	name, found := "", false
	for _, ap := range act.Prizes {
		if ap.ID == pid {
			name, found = ap.Name, true
		}
	}
	if !found {
		// Every prize of the activity has a stock row in each of its sessions; any other id
		// is not found here rather than a store error.
		p.fail(w, r, fmt.Errorf("prize %d of session %d: %w", pid, sid, seckill.ErrNotFound))
		return
	}
	ps, err := p.catalog.PrizeStock(ctx, sid, pid)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	rows, err := p.catalog.Buckets(ctx, sid, pid)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	details, err := p.gate.BucketDetails(ctx, seckill.SessionPrize{Session: sid, Prize: pid}, len(rows))
	if err != nil {
		p.fail(w, r, err)
		return
	}
	transfers, err := p.catalog.UnfinishedTransfersOf(ctx, sid, pid)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	v := prizePageView{SessionID: sid, PrizeID: pid, Name: name, ActivityID: act.ID, ActivityName: act.Name,
		State: sessionState(s, p.now().UTC()), Buckets: ps.Buckets, DB: dbStockView{Total: ps.Total, Left: ps.Left},
		BucketRows: make([]bucketView, len(rows)), Transfers: make([]transferView, len(transfers))}
	snaps := make([]stock.Snapshot, len(details))
	states := make([]stock.BucketState, 0, len(details))
	for i, b := range rows {
		d := details[i]
		v.BucketRows[i] = bucketView{Bucket: b.Bucket, DB: dbStockView{Total: b.Total, Left: b.Left, Version: b.Version}, Redis: d}
		snaps[i] = d.Snapshot
		if d.Loaded {
			states = append(states, stock.BucketState{Loaded: true, Left: d.Left, Total: d.Total, Sent: d.Sent, Received: d.Received})
		}
	}
	if len(rows) == 1 {
		// A prize without buckets has one row: its version is the prize's.
		v.DB.Version = rows[0].Version
	}
	v.Redis = stock.SumSnapshots(snaps)
	v.InFlight = stock.InFlight(states)
	for i, t := range transfers {
		v.Transfers[i] = transferView{ID: t.ID, From: t.From, To: t.To, Requested: t.Requested, Taken: t.Taken,
			Units: t.Units, State: t.State, Fence: t.Fence}
	}
	jsonapi.Write(w, http.StatusOK, v)
}
