package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// fakeOverviewSources answers the overview from memory: sessions, one prize each.
type fakeOverviewSources struct {
	sessions []seckill.Session
}

func (f fakeOverviewSources) SessionsOverlapping(_ context.Context, from, to time.Time) ([]seckill.Session, error) {
	var out []seckill.Session
	for _, s := range f.sessions {
		if s.Start.Before(to) && s.End.After(from) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f fakeOverviewSources) Stocks(_ context.Context, ids ...int64) ([]seckill.Stock, error) {
	out := make([]seckill.Stock, len(ids))
	for i, id := range ids {
		out[i] = seckill.Stock{SessionID: id, PrizeID: 1, Total: 5, Left: 5}
	}
	return out, nil
}

func (f fakeOverviewSources) Activity(_ context.Context, id int64) (seckill.Activity, error) {
	return seckill.Activity{ID: id, Name: fmt.Sprintf("activity %d", id), Prizes: []seckill.Prize{{ID: 1, Name: "phone"}}}, nil
}

// No prize has stock buckets here.
func (f fakeOverviewSources) BucketedStocks(context.Context, ...int64) ([]store.PrizeStock, error) {
	return nil, nil
}

func (f fakeOverviewSources) ReplayOffsets(context.Context, string) (map[int]int64, error) {
	return nil, nil
}

func (f fakeOverviewSources) PrizeSnapshots(_ context.Context, stocks []seckill.Stock) ([]stock.Snapshot, error) {
	for _, st := range stocks {
		if st.BucketCount() > 1 {
			return nil, errors.New("no stock buckets here")
		}
	}
	return make([]stock.Snapshot, len(stocks)), nil
}

func (f fakeOverviewSources) Lag(context.Context, string, event.Topic) (map[int]int64, error) {
	return map[int]int64{}, nil
}

func (f fakeOverviewSources) Offsets(context.Context, string) (map[int]event.PartitionOffsets, error) {
	return nil, nil
}

func (f fakeOverviewSources) OpenByKind(context.Context) (map[string]int, error) {
	return map[string]int{}, nil
}

// The live view shows every open session and each activity's next one, with their stock;
// the other sessions of the day (an activity every ten minutes has dozens ahead) are a
// count and, on request, a page of one-line entries: upcoming first by start, then ended
// ones, latest first. Before, the live view listed the next ten upcoming sessions and the
// last ten ended ones with their stock, a card each.
func TestOverviewShowsOpenAndNextSessions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	var sessions []seckill.Session
	id := int64(100)
	add := func(activity int64, start time.Time, length time.Duration, closed bool) int64 {
		id++
		s := seckill.Session{ID: id, ActivityID: activity, Start: start, End: start.Add(length)}
		if closed {
			at := start.Add(time.Minute)
			s.ClosedAt = &at
		}
		sessions = append(sessions, s)
		return id
	}
	// Activity 1: every ten minutes from 10:00 to 18:00; the 12:00 one is open, 11:00 was
	// closed early.
	var a1 []int64
	for start := now.Truncate(24 * time.Hour).Add(10 * time.Hour); start.Hour() < 18; start = start.Add(10 * time.Minute) {
		a1 = append(a1, add(1, start, 5*time.Minute, start.Hour() == 11 && start.Minute() == 0))
	}
	// Activity 2: every half hour from 13:00 to 20:00, none open yet.
	var a2 []int64
	for start := now.Truncate(time.Hour).Add(time.Hour); start.Hour() < 20; start = start.Add(30 * time.Minute) {
		a2 = append(a2, add(2, start, 10*time.Minute, false))
	}
	open, next1, next2 := a1[12], a1[13], a2[0] // 12:00, 12:10, 13:00
	slices.SortFunc(sessions, func(a, b seckill.Session) int { return a.Start.Compare(b.Start) })

	src := fakeOverviewSources{sessions: sessions}
	o := &overview{catalog: src, gate: src, kafka: src, cases: src, topics: event.DefaultTopics(""), now: func() time.Time { return now },
		fail: func(w http.ResponseWriter, _ *http.Request, err error) { t.Fatal(err) }}
	get := func(query string) (int, overviewView) {
		t.Helper()
		w := httptest.NewRecorder()
		o.serve(w, httptest.NewRequest("GET", "/admin/v1/overview"+query, nil))
		var v overviewView
		if w.Code == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
		}
		return w.Code, v
	}
	ids := func(ss []sessionLive) []int64 {
		out := []int64{}
		for _, s := range ss {
			out = append(out, s.SessionID)
		}
		return out
	}

	code, v := get("")
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	if got, want := ids(v.Sessions), []int64{open, next1, next2}; !slices.Equal(got, want) {
		t.Fatalf("live sessions %v, want the open one and each activity's next %v", got, want)
	}
	if v.Sessions[0].State != "open" || v.Sessions[1].State != "upcoming" || len(v.Sessions[0].Prizes) != 1 {
		t.Fatalf("live sessions %+v", v.Sessions)
	}
	others := len(sessions) - 3
	if v.Others.Total != others || len(v.Others.Sessions) != 0 {
		t.Fatalf("others: %d listed of %d, want none of %d", len(v.Others.Sessions), v.Others.Total, others)
	}

	_, page := get("?others_limit=5")
	var got []int64
	for _, s := range page.Others.Sessions {
		got = append(got, s.SessionID)
	}
	// Upcoming first, by start: 12:20 and 12:30 of activity 1, ... then 13:00 is activity 2's
	// next (shown above), so 12:40, 12:50, 13:00 of activity 1.
	if want := []int64{a1[14], a1[15], a1[16], a1[17], a1[18]}; !slices.Equal(got, want) || page.Others.Total != others {
		t.Fatalf("first page of the others %v of %d, want %v of %d", got, page.Others.Total, want, others)
	}
	_, all := get("?others_limit=500")
	if len(all.Others.Sessions) != others {
		t.Fatalf("all others: %d, want %d", len(all.Others.Sessions), others)
	}
	last := all.Others.Sessions[others-1]
	if last.SessionID != a1[0] || last.State != "ended" || all.Others.Sessions[others-7].State != "closed" {
		t.Fatalf("the ended sessions come last, latest first: %+v", all.Others.Sessions[others-13:])
	}
	for _, q := range []string{"?others_limit=", "?others_limit=-1", "?others_limit=501", "?others_limit=05", "?others_limit=x"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
}
