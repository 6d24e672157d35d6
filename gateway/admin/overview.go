package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

type overviewCatalog interface {
	SessionsOverlapping(ctx context.Context, from, to time.Time) ([]seckill.Session, error)
	Stocks(ctx context.Context, sessionIDs ...int64) ([]seckill.Stock, error)
	Activity(ctx context.Context, id int64) (seckill.Activity, error)
	bucketedCatalog
	ReplayOffsets(ctx context.Context, topic string) (map[int]int64, error)
}

type overviewKafka interface {
	Lag(ctx context.Context, group string, t event.Topic) (map[int]int64, error)
	Offsets(ctx context.Context, topic string) (map[int]event.PartitionOffsets, error)
}

type openCaseCounter interface {
	OpenByKind(ctx context.Context) (map[string]int, error)
}

// overview answers the operator console's live view: today's and the coming sessions with
// each prize's stock as MySQL and Redis see it, the consumers' lag, the compensation backlog
// and the open exception cases, in one call. What cannot be read (Kafka down) is left out
// and named in "errors"; the rest is still answered.
type overview struct {
	catalog overviewCatalog
	gate    adminGate
	kafka   overviewKafka
	cases   openCaseCounter
	group   string
	topics  event.Topics
	now     func() time.Time
	fail    func(w http.ResponseWriter, r *http.Request, err error)
}

// overviewOthersMax bounds ?others_limit: the one-line entries of the sessions not shown
// with their stock (an activity repeating every minute has over a thousand a day).
const overviewOthersMax = 500

type prizeLive struct {
	PrizeID   int64          `json:"prize_id"`
	Name      string         `json:"name"`
	Buckets   int            `json:"buckets"` // stock buckets; every figure is summed over them
	Total     int            `json:"total"`
	MySQLLeft int            `json:"mysql_left"`
	Sold      int            `json:"sold"`
	Redis     stock.Snapshot `json:"redis"`
	// Admitted counts Redis admissions (total minus Redis left); the console turns its
	// change between two refreshes into admissions per second.
	Admitted int64  `json:"admitted"`
	Lag      *int64 `json:"lag"` // events of this prize's partitions not consumed yet (shared with the prizes hashed there)
}

// prizeLag is the consumer lag of the grab partitions a prize's events go to: its key's, or
// with stock buckets every bucket's key's (event.BucketPartitionKey), each partition once.
func prizeLag(lag map[int]int64, st seckill.Stock, partitions int) int64 {
	seen := map[int]bool{}
	var n int64
	for b := range st.BucketCount() {
		p := event.PartitionOf(event.BucketPartitionKey(st.SessionID, st.PrizeID, b), partitions)
		if !seen[p] {
			seen[p] = true
			n += lag[p]
		}
	}
	return n
}

// sessionLive is an open or next session with its prizes' stock (the brief's fields, flat
// in the JSON).
type sessionLive struct {
	sessionBrief
	Prizes []prizeLive `json:"prizes"`
}

// sessionBrief is a session of the day; the live view shows the others without their stock.
type sessionBrief struct {
	SessionID    int64     `json:"session_id"`
	ActivityID   int64     `json:"activity_id"`
	ActivityName string    `json:"activity_name"`
	StartsAt     time.Time `json:"starts_at"`
	EndsAt       time.Time `json:"ends_at"`
	State        string    `json:"state"`
}

// othersView counts the other sessions of the day and lists the first ?others_limit of them.
type othersView struct {
	Total    int            `json:"total"`
	Sessions []sessionBrief `json:"sessions"`
}

type overviewView struct {
	GeneratedAt         time.Time      `json:"generated_at"`
	ConsumerLag         *int64         `json:"consumer_lag"`
	CompensationBacklog *int64         `json:"compensation_backlog"`
	OpenExceptions      map[string]int `json:"open_exceptions"`
	Sessions            []sessionLive  `json:"sessions"`
	Others              othersView     `json:"others"`
	Errors              []string       `json:"errors"`
}

func sessionState(s seckill.Session, now time.Time) string {
	switch {
	case s.ClosedAt != nil && !now.Before(*s.ClosedAt):
		return "closed"
	case s.OpenAt(now):
		return "open"
	case now.Before(s.Start):
		return "upcoming"
	}
	return "ended"
}

// pick splits the day's sessions into those the live view shows with their stock (every
// open one and each activity's next one, by start) and the others: the later upcoming ones
// by start, then the ended and closed ones, latest first (what an operator looks for next).
func pick(all []seckill.Session, now time.Time) (shown, others []seckill.Session) {
	all = slices.Clone(all)
	sort.SliceStable(all, func(i, j int) bool { return all[i].Start.Before(all[j].Start) })
	var upcoming, ended []seckill.Session
	next := map[int64]bool{} // activities whose next session is shown
	for _, s := range all {
		switch sessionState(s, now) {
		case "open":
			shown = append(shown, s)
		case "upcoming":
			if !next[s.ActivityID] {
				next[s.ActivityID] = true
				shown = append(shown, s)
				continue
			}
			upcoming = append(upcoming, s)
		default:
			ended = append(ended, s)
		}
	}
	slices.Reverse(ended)
	return shown, append(upcoming, ended...)
}

// othersLimit reads ?others_limit: 0 (the default) to overviewOthersMax, canonical decimal.
func othersLimit(r *http.Request) (int, bool) {
	q := r.URL.Query()
	if !q.Has("others_limit") {
		return 0, true
	}
	v := q.Get("others_limit")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > overviewOthersMax || strconv.Itoa(n) != v {
		return 0, false
	}
	return n, true
}

func (o *overview) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	limit, ok := othersLimit(r)
	if !ok {
		jsonapi.BadInput(w, seckill.ValidationError{{Field: "others_limit",
			Message: fmt.Sprintf("must be 0 to %d, in canonical decimal", overviewOthersMax)}})
		return
	}
	now := o.now().UTC()
	day := now.Truncate(24 * time.Hour)
	all, err := o.catalog.SessionsOverlapping(ctx, day, now.Add(24*time.Hour))
	if err != nil {
		o.fail(w, r, err)
		return
	}
	sessions, others := pick(all, now)
	listed := others[:min(limit, len(others))]
	v := overviewView{GeneratedAt: now, Sessions: []sessionLive{}, Errors: []string{},
		Others: othersView{Total: len(others), Sessions: []sessionBrief{}}}
	if v.OpenExceptions, err = o.cases.OpenByKind(ctx); err != nil {
		o.fail(w, r, err)
		return
	}
	ids := make([]int64, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	stocks, err := o.catalog.Stocks(ctx, ids...)
	if err != nil {
		o.fail(w, r, err)
		return
	}
	snaps, err := prizeFigures(ctx, o.catalog, o.gate, stocks)
	if err != nil {
		o.fail(w, r, err)
		return
	}
	lag := o.lag(ctx, &v)
	names := map[int64]seckill.Activity{}
	for _, s := range append(slices.Clone(sessions), listed...) {
		if _, ok := names[s.ActivityID]; ok {
			continue
		}
		a, err := o.catalog.Activity(ctx, s.ActivityID)
		if err != nil {
			o.fail(w, r, err)
			return
		}
		names[s.ActivityID] = a
	}
	bySession := map[int64][]prizeLive{}
	for i, st := range stocks {
		p := prizeLive{PrizeID: st.PrizeID, Buckets: st.BucketCount(), Total: st.Total, MySQLLeft: st.Left,
			Sold: st.Total - st.Left, Redis: snaps[i]}
		if snaps[i].Loaded {
			p.Admitted = snaps[i].Total - snaps[i].Left
		}
		if lag != nil {
			n := prizeLag(lag, st, o.topics.Grab.Partitions)
			p.Lag = &n
		}
		bySession[st.SessionID] = append(bySession[st.SessionID], p)
	}
	for _, s := range sessions {
		a := names[s.ActivityID]
		prizes := bySession[s.ID]
		for i := range prizes {
			for _, ap := range a.Prizes {
				if ap.ID == prizes[i].PrizeID {
					prizes[i].Name = ap.Name
				}
			}
		}
		if prizes == nil {
			prizes = []prizeLive{}
		}
		v.Sessions = append(v.Sessions, sessionLive{sessionBrief: brief(s, a.Name, now), Prizes: prizes})
	}
	for _, s := range listed {
		v.Others.Sessions = append(v.Others.Sessions, brief(s, names[s.ActivityID].Name, now))
	}
	jsonapi.Write(w, http.StatusOK, v)
}

func brief(s seckill.Session, activity string, now time.Time) sessionBrief {
	return sessionBrief{SessionID: s.ID, ActivityID: s.ActivityID, ActivityName: activity,
		StartsAt: s.Start, EndsAt: s.End, State: sessionState(s, now)}
}

// lag reads the consumer group's lag per grab partition and the compensation backlog; what
// Kafka does not answer within two seconds is reported in v.Errors and left null.
func (o *overview) lag(ctx context.Context, v *overviewView) map[int]int64 {
	kctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lag, err := o.kafka.Lag(kctx, o.group, o.topics.Grab)
	if err != nil {
		v.Errors = append(v.Errors, "consumer lag: "+err.Error())
		lag = nil
	} else {
		var total int64
		for _, n := range lag {
			total += n
		}
		v.ConsumerLag = &total
	}
	stored, err := o.catalog.ReplayOffsets(kctx, o.topics.Compensation.Name)
	if err == nil {
		var bounds map[int]event.PartitionOffsets
		if bounds, err = o.kafka.Offsets(kctx, o.topics.Compensation.Name); err == nil {
			n := event.Backlog(event.Positions(bounds, stored))
			v.CompensationBacklog = &n
		}
	}
	if err != nil {
		v.Errors = append(v.Errors, "compensation backlog: "+err.Error())
	}
	return lag
}
