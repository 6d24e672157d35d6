package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/preheat"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// prizeViews serves the admin API's session view and the prize's page over op's database
// and Redis.
func prizeViews(t *testing.T, op *stacktest.OpenPrize) func(path string, into any) int {
	t.Helper()
	cat := store.NewCatalog(op.DB, time.Now)
	mux := http.NewServeMux()
	adm := newAdmin(cat, op.Gate, preheat.New(cat, op.Gate, time.Hour, time.Now), tokenNames{adminToken: "admin"}, clientip.Peer,
		func() {}, slog.New(slog.DiscardHandler))
	adm.register(mux)
	(&prizePage{catalog: cat, gate: op.Gate, now: time.Now, fail: adm.fail}).register(adm, mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return func(path string, into any) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(raw, into); err != nil {
				t.Fatalf("%s: %v in %s", path, err, raw)
			}
		}
		return resp.StatusCode
	}
}

// A prize with four stock buckets, one grab admitted in bucket 2, a transfer from bucket 0
// to bucket 3 taken in Redis but not moved in MySQL, demand counted in bucket 1 and bucket 3
// wanted. The session view shows the prize's stock summed over its buckets in MySQL and in
// Redis (before, Redis was bucket 0's keys: 3 left of 3), and the prize's page shows each
// bucket, the units in flight and the unfinished transfer.
func TestBucketedPrizeViews(t *testing.T) {
	op := stacktest.NewBucketedPrize(t, 3, 4, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	sid, pid := op.SessionID, op.PrizeID
	t.Cleanup(func() {
		for b := range 4 {
			k := stock.BucketKeysFor(sid, pid, b, 4)
			op.Redis.Del(context.Background(), k.Demand(), k.Wanted())
		}
	})
	grab := seckill.Grab{RequestID: "r-bucket-2", UserID: "u", SessionID: sid, PrizeID: pid, Bucket: 2, Buckets: 4, AdmittedAt: time.Now()}
	if v, err := op.Gate.Reserve(ctx, grab); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve in bucket 2: %+v %v", v, err)
	}
	if err := op.Redis.IncrBy(ctx, stock.BucketKeysFor(sid, pid, 1, 4).Demand(), 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := op.Redis.Set(ctx, stock.BucketKeysFor(sid, pid, 3, 4).Wanted(), 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h, ok, err := lease.New(op.DB, "prize-page-test", time.Minute).TryAcquire(ctx)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	cat := store.NewCatalog(op.DB, time.Now)
	tr, err := cat.PlanTransfer(ctx, h.Fence, sid, pid, 0, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := op.Gate.Take(ctx, sid, pid, 0, 4, tr.ID, 2, h.Fence.Number); err != nil || n != 2 {
		t.Fatalf("take: %d %v", n, err)
	}
	get := prizeViews(t, op)

	var sess sessionView
	if code := get("/admin/v1/sessions/"+itoa(sid), &sess); code != http.StatusOK || len(sess.Stock) != 1 {
		t.Fatalf("session view: %d %+v", code, sess)
	}
	sv := sess.Stock[0]
	if sv.Buckets != 4 || sv.DB.Total != 12 || sv.DB.Left != 12 {
		t.Errorf("session view's MySQL: %+v, want 4 buckets, 12 of 12", sv)
	}
	// Redis: 12 loaded, 1 admitted, 2 in flight (in no bucket).
	if r := sv.Redis; !r.Loaded || r.Left != 9 || r.Total != 10 || r.Pending != 1 || r.Limit != 1 {
		t.Errorf("session view's Redis: %+v, want loaded, 9 left of 10, 1 pending (the buckets' sums)", r)
	}

	var page prizePageView
	if code := get("/admin/v1/sessions/"+itoa(sid)+"/prizes/"+itoa(pid), &page); code != http.StatusOK {
		t.Fatalf("prize page: %d", code)
	}
	if page.Buckets != 4 || page.Name != "hot" || page.State != "open" || page.DB.Total != 12 || page.DB.Left != 12 ||
		page.Redis.Left != 9 || page.Redis.Pending != 1 || page.InFlight != 2 {
		t.Errorf("prize page: %+v", page)
	}
	type row struct {
		bucket, total, left                        int
		redisLeft, sent, received, pending, demand int64
		wanted                                     bool
	}
	want := []row{
		{0, 3, 3, 1, 2, 0, 0, 0, false},
		{1, 3, 3, 3, 0, 0, 0, 5, false},
		{2, 3, 3, 2, 0, 0, 1, 0, false},
		{3, 3, 3, 3, 0, 0, 0, 0, true},
	}
	var got []row
	for _, b := range page.BucketRows {
		if !b.Redis.Loaded {
			t.Errorf("bucket %d not loaded", b.Bucket)
		}
		got = append(got, row{b.Bucket, b.DB.Total, b.DB.Left, b.Redis.Left, b.Redis.Sent, b.Redis.Received, b.Redis.Pending,
			b.Redis.Demand, b.Redis.Wanted})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bucket rows\n got %+v\nwant %+v", got, want)
	}
	if len(page.Transfers) != 1 || page.Transfers[0] != (transferView{ID: tr.ID, From: 0, To: 3, Requested: 2, State: store.TransferPlanned,
		Fence: h.Fence.Number}) {
		t.Errorf("transfers %+v, want the planned one", page.Transfers)
	}
	// Reading the page left the demand counter to the rebalance loop.
	if n, err := op.Redis.Get(ctx, stock.BucketKeysFor(sid, pid, 1, 4).Demand()).Int64(); err != nil || n != 5 {
		t.Errorf("bucket 1's demand after the page: %d %v, want 5 (read, not reset)", n, err)
	}

	if code := get("/admin/v1/sessions/"+itoa(sid)+"/prizes/"+itoa(pid+1000), &page); code != http.StatusNotFound {
		t.Errorf("a prize not in the session: %d, want 404", code)
	}
	if code := get("/admin/v1/sessions/"+itoa(sid+1000)+"/prizes/"+itoa(pid), &page); code != http.StatusNotFound {
		t.Errorf("a session that does not exist: %d, want 404", code)
	}
}

// A prize without buckets reads as it always did: the session view's Redis is the prize's
// own snapshot, and its page has one bucket row, the prize's row and keys.
func TestUnbucketedPrizeViews(t *testing.T) {
	op := stacktest.NewOpenPrize(t, 5, 5, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	grab := seckill.Grab{RequestID: "r-1", UserID: "u", SessionID: op.SessionID, PrizeID: op.PrizeID, AdmittedAt: time.Now()}
	if v, err := op.Gate.Reserve(ctx, grab); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve: %+v %v", v, err)
	}
	snaps, err := op.Gate.Snapshots(ctx, []seckill.SessionPrize{{Session: op.SessionID, Prize: op.PrizeID}})
	if err != nil {
		t.Fatal(err)
	}
	get := prizeViews(t, op)
	var sess sessionView
	if code := get("/admin/v1/sessions/"+itoa(op.SessionID), &sess); code != http.StatusOK || len(sess.Stock) != 1 {
		t.Fatalf("session view: %d %+v", code, sess)
	}
	snaps[0].TTLMillis = sess.Stock[0].Redis.TTLMillis // read a moment apart
	if sv := sess.Stock[0]; sv.Buckets != 1 || sv.DB != (dbStockView{Total: 5, Left: 5}) || sv.Redis != snaps[0] {
		t.Errorf("session view %+v, want the row and the prize's own snapshot %+v", sv, snaps[0])
	}
	var page prizePageView
	if code := get("/admin/v1/sessions/"+itoa(op.SessionID)+"/prizes/"+itoa(op.PrizeID), &page); code != http.StatusOK {
		t.Fatalf("prize page: %d", code)
	}
	if page.Buckets != 1 || len(page.BucketRows) != 1 || page.InFlight != 0 || len(page.Transfers) != 0 ||
		page.Redis.Left != 4 || page.Redis.Pending != 1 || page.BucketRows[0].Redis.Snapshot.Left != 4 {
		t.Errorf("prize page of a prize without buckets: %+v", page)
	}
}

// fakeBucketedOverview is the overview's sources with one open session whose prize 1 has
// three stock buckets and prize 2 none.
type fakeBucketedOverview struct {
	fakeOverviewSources
	lag map[int]int64
}

func (f fakeBucketedOverview) Stocks(_ context.Context, ids ...int64) ([]seckill.Stock, error) {
	return []seckill.Stock{
		{SessionID: ids[0], PrizeID: 1, Buckets: 3, Total: 4, Left: 3}, // bucket 0's share
		{SessionID: ids[0], PrizeID: 2, Buckets: 1, Total: 5, Left: 5},
	}, nil
}

func (f fakeBucketedOverview) BucketedStocks(_ context.Context, ids ...int64) ([]store.PrizeStock, error) {
	return []store.PrizeStock{{SessionID: ids[0], PrizeID: 1, Buckets: 3, Total: 10, Left: 7}}, nil
}

// PrizeSnapshots reads prize 2 as one snapshot and prize 1 as the sum of its three
// buckets', as the gate does.
func (f fakeBucketedOverview) PrizeSnapshots(_ context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error) {
	out := make([]stock.Snapshot, len(stocks))
	for i, st := range stocks {
		sid := st.SessionID
		switch n := st.BucketCount(); {
		case st.PrizeID == 1 && n == 3:
			out[i] = stock.SumSnapshots([]stock.Snapshot{
				{SessionID: sid, PrizeID: 1, Loaded: true, Left: 2, Total: 4, Pending: 1},
				{SessionID: sid, PrizeID: 1, Loaded: true, Left: 1, Total: 3, Pending: 2},
				{SessionID: sid, PrizeID: 1, Loaded: true, Left: 3, Total: 3},
			})
		case st.PrizeID != 1 && n == 1:
			out[i] = stock.Snapshot{SessionID: sid, PrizeID: st.PrizeID, Loaded: true, Left: 4, Total: 5, Pending: 1}
		default:
			return nil, fmt.Errorf("prize %d read as %d buckets: only prize 1 has buckets, 3", st.PrizeID, n)
		}
	}
	return out, nil
}

func (f fakeBucketedOverview) Lag(context.Context, string, event.Topic) (map[int]int64, error) {
	return f.lag, nil
}

// The live view shows a bucketed prize's figures summed over its buckets: MySQL's from
// BucketedStocks, Redis's from every bucket's keys, the lag of every partition its buckets'
// events go to; a prize without buckets keeps its row, its own keys and its one partition.
func TestOverviewSumsBuckets(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	topics := event.DefaultTopics("")
	const sid = 7
	lag := map[int]int64{}
	parts := map[int]bool{}
	for b := range 3 {
		parts[event.PartitionOf(event.BucketPartitionKey(sid, 1, b), topics.Grab.Partitions)] = true
	}
	var wantLag int64
	for p := range parts {
		lag[p] = int64(10 * (p + 1))
		wantLag += lag[p]
	}
	plain := event.PartitionOf(event.PartitionKey(sid, 2), topics.Grab.Partitions)
	lag[plain] += 1000
	if parts[plain] {
		wantLag += 1000
	}
	src := fakeBucketedOverview{fakeOverviewSources: fakeOverviewSources{sessions: []seckill.Session{
		{ID: sid, ActivityID: 1, Start: now.Add(-time.Minute), End: now.Add(time.Hour)}}}, lag: lag}
	o := &overview{catalog: src, gate: src, kafka: src, cases: src, topics: topics, now: func() time.Time { return now },
		fail: func(w http.ResponseWriter, _ *http.Request, err error) { t.Fatal(err) }}
	w := httptest.NewRecorder()
	o.serve(w, httptest.NewRequest("GET", "/admin/v1/overview", nil))
	var v overviewView
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || len(v.Sessions) != 1 || len(v.Sessions[0].Prizes) != 2 {
		t.Fatalf("overview: %d %s %v", w.Code, w.Body, err)
	}
	hot, other := v.Sessions[0].Prizes[0], v.Sessions[0].Prizes[1]
	if hot.Buckets != 3 || hot.Total != 10 || hot.MySQLLeft != 7 || hot.Sold != 3 || !hot.Redis.Loaded || hot.Redis.Left != 6 ||
		hot.Redis.Total != 10 || hot.Redis.Pending != 3 || hot.Admitted != 4 || hot.Lag == nil || *hot.Lag != wantLag {
		t.Errorf("bucketed prize %+v (lag %v), want its buckets' sums and lag %d", hot, derefLag(hot.Lag), wantLag)
	}
	if other.Buckets != 1 || other.Total != 5 || other.MySQLLeft != 5 || other.Redis.Left != 4 || other.Admitted != 1 ||
		other.Lag == nil || *other.Lag != lag[plain] {
		t.Errorf("prize without buckets %+v (lag %v), want its row, its keys and its partition's lag %d", other, derefLag(other.Lag), lag[plain])
	}
}

func derefLag(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
