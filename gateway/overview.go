package main

import (
	"context"
	"net/http"
	"sort"
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

// Sessions shown: every open one, the next upcoming ones and the latest ended ones of today
// (an activity repeating every minute has over a thousand sessions a day).
const overviewAround = 10

type prizeLive struct {
	PrizeID   int64          `json:"prize_id"`
	Name      string         `json:"name"`
	Total     int            `json:"total"`
	MySQLLeft int            `json:"mysql_left"`
	Sold      int            `json:"sold"`
	Redis     stock.Snapshot `json:"redis"`
	// Admitted counts Redis admissions (total minus Redis left); the console turns its
	// change between two refreshes into admissions per second.
	Admitted int64  `json:"admitted"`
	Lag      *int64 `json:"lag"` // events of this prize's partition not consumed yet (shared with the prizes hashed there)
}

type sessionLive struct {
	SessionID    int64       `json:"session_id"`
	ActivityID   int64       `json:"activity_id"`
	ActivityName string      `json:"activity_name"`
	StartsAt     time.Time   `json:"starts_at"`
	EndsAt       time.Time   `json:"ends_at"`
	State        string      `json:"state"`
	Prizes       []prizeLive `json:"prizes"`
}

type overviewView struct {
	GeneratedAt         time.Time      `json:"generated_at"`
	ConsumerLag         *int64         `json:"consumer_lag"`
	CompensationBacklog *int64         `json:"compensation_backlog"`
	OpenExceptions      map[string]int `json:"open_exceptions"`
	Sessions            []sessionLive  `json:"sessions"`
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

// pick keeps the open sessions, the next upcoming and the latest ended ones.
func pick(all []seckill.Session, now time.Time) []seckill.Session {
	var open, upcoming, ended []seckill.Session
	for _, s := range all {
		switch sessionState(s, now) {
		case "open":
			open = append(open, s)
		case "upcoming":
			upcoming = append(upcoming, s)
		default:
			ended = append(ended, s)
		}
	}
	out := append(open, upcoming[:min(len(upcoming), overviewAround)]...)
	out = append(out, ended[max(0, len(ended)-overviewAround):]...)
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func (o *overview) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := o.now().UTC()
	day := now.Truncate(24 * time.Hour)
	all, err := o.catalog.SessionsOverlapping(ctx, day, now.Add(24*time.Hour))
	if err != nil {
		o.fail(w, r, err)
		return
	}
	sessions := pick(all, now)
	v := overviewView{GeneratedAt: now, Sessions: []sessionLive{}, Errors: []string{}}
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
	pairs := make([][2]int64, len(stocks))
	for i, s := range stocks {
		pairs[i] = [2]int64{s.SessionID, s.PrizeID}
	}
	snaps, err := o.gate.Snapshots(ctx, pairs)
	if err != nil {
		o.fail(w, r, err)
		return
	}
	lag := o.lag(ctx, &v)
	names := map[int64]seckill.Activity{}
	for _, s := range sessions {
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
		p := prizeLive{PrizeID: st.PrizeID, Total: st.Total, MySQLLeft: st.Left, Sold: st.Total - st.Left, Redis: snaps[i]}
		if snaps[i].Loaded {
			p.Admitted = snaps[i].Total - snaps[i].Left
		}
		if lag != nil {
			n := lag[event.PartitionOf(event.PartitionKey(st.SessionID, st.PrizeID), o.topics.Grab.Partitions)]
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
		v.Sessions = append(v.Sessions, sessionLive{SessionID: s.ID, ActivityID: s.ActivityID, ActivityName: a.Name,
			StartsAt: s.Start, EndsAt: s.End, State: sessionState(s, now), Prizes: prizes})
	}
	jsonapi.Write(w, http.StatusOK, v)
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
