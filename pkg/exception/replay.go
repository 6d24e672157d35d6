package exception

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// HeaderReplayedBy marks a message a person replayed from the workbench ("case:<id>").
const HeaderReplayedBy = "replayed-by"

type orderLookup interface {
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
}

type stockLookup interface {
	Stock(ctx context.Context, sessionID, prizeID int64) (seckill.Stock, error)
}

type requestLookup interface {
	LookupBucket(ctx context.Context, requestID string, b, buckets int) (stock.Lookup, error)
}

type producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Replayer produces a case's events again after checking that the case still applies: a
// grab whose order exists, whose session×prize MySQL does not know, or whose reservation
// Redis no longer holds is refused with the reason. Producing twice is safe (the consumer
// dedupes by request id); refusing first keeps the workbench honest about what it did.
//
// A grab of a prize with stock buckets (docs/design.md) is reserved on its bucket's keys:
// a dead letter's bucket is the event's, a stale case's the one its evidence names (a case
// without one: the user's home bucket, the only one that admits them), and the grab is
// produced again with that bucket, keyed session:prize:b.
type Replayer struct {
	Orders orderLookup
	Stocks stockLookup
	Gate   requestLookup
	// Writers by topic name: the grab topic's and the compensation topic's. A dead letter
	// read from any other topic is refused.
	Writers map[string]producer
	// GrabTopic is where a stale reservation's grab is produced.
	GrabTopic string
}

// NewReplayer returns a Replayer producing with grabs to the grab topic and with comp to the
// compensation topic.
func NewReplayer(orders orderLookup, stocks stockLookup, gate requestLookup, topics event.Topics, grabs, comp producer) *Replayer {
	return &Replayer{Orders: orders, Stocks: stocks, Gate: gate, GrabTopic: topics.Grab.Name,
		Writers: map[string]producer{topics.Grab.Name: grabs, topics.Compensation.Name: comp}}
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), store.ErrNotReplayable)
}

// Replay implements store.Replay.
func (r *Replayer) Replay(ctx context.Context, c store.CaseDetail) (string, error) {
	switch c.Kind {
	case seckill.CaseDeadLetter:
		return r.deadLetter(ctx, c)
	case seckill.CaseStaleReservation:
		return r.stale(ctx, c)
	}
	return "", refuse("%s cases carry no event to replay", c.Kind)
}

func (r *Replayer) deadLetter(ctx context.Context, c store.CaseDetail) (string, error) {
	var ev struct {
		Message *Message `json:"message"`
	}
	if err := json.Unmarshal(c.Evidence, &ev); err != nil || ev.Message == nil {
		return "", refuse("the case has no message in its evidence")
	}
	m := *ev.Message
	w, ok := r.Writers[m.Topic]
	if !ok {
		return "", refuse("the message came from topic %q, not this deployment's grab or compensation topic", m.Topic)
	}
	if m.Truncated {
		// The key or the value was cut (messageOf): replaying either would produce
		// another message than the one dead-lettered.
		return "", refuse("the case kept only part of the message (its key or its value of %d bytes); the original is at %s partition %d offset %d (sha256 %s)",
			m.Size, m.Topic, m.Partition, m.Offset, m.SHA256)
	}
	value, err := m.Bytes()
	if err != nil {
		return "", refuse("the message's value is unreadable: %v", err)
	}
	g, err := event.DecodeGrab(value)
	if err != nil {
		return "", refuse("the message does not decode as a grab (%v); replaying it would dead-letter it again", err)
	}
	if err := r.stillApplies(ctx, g); err != nil {
		return "", err
	}
	n := 1 // the prize's N, which names a bucket's keys; any for bucket 0
	if g.Bucket > 0 {
		if n, err = r.bucketExists(ctx, g); err != nil {
			return "", err
		}
	}
	// Only a reservation Redis still holds keeps the grab's unit out of sale. After a key
	// loss the rebuild copies MySQL, where this grab never arrived, so its unit is sold again;
	// producing it then would hand that unit out twice (MySQL refuses: admitted_rejected).
	l, err := r.reserved(ctx, g.RequestID, g.Bucket, n)
	if err != nil {
		return "", err
	}
	if l.Owner != g.UserID {
		return "", refuse("Redis holds %s for user %q, the message names %q", g.RequestID, l.Owner, g.UserID)
	}
	if _, err := r.Stocks.Stock(ctx, g.SessionID, g.PrizeID); errors.Is(err, seckill.ErrNotFound) {
		return "", refuse("MySQL has no stock row for session %d prize %d (the cause of the dead letter); restore it first", g.SessionID, g.PrizeID)
	} else if err != nil {
		return "", fmt.Errorf("check stock row: %w", err)
	}
	// The message goes back as it was read (its schema header, a compensation envelope),
	// marked as replayed by this case.
	out := kafka.Message{Key: []byte(m.Key), Value: value}
	for k, v := range m.Headers {
		if k != HeaderReplayedBy {
			out.Headers = append(out.Headers, kafka.Header{Key: k, Value: []byte(v)})
		}
	}
	sort.Slice(out.Headers, func(i, j int) bool { return out.Headers[i].Key < out.Headers[j].Key })
	out.Headers = append(out.Headers, kafka.Header{Key: HeaderReplayedBy, Value: []byte("case:" + strconv.FormatInt(c.ID, 10))})
	if err := w.WriteMessages(ctx, out); err != nil {
		return "", fmt.Errorf("produce to %s: %w", m.Topic, err)
	}
	return "grab " + g.RequestID + " produced to " + m.Topic, nil
}

func (r *Replayer) stale(ctx context.Context, c store.CaseDetail) (string, error) {
	if c.SessionID == nil || c.PrizeID == nil {
		return "", refuse("the case names no session and prize")
	}
	var ev struct {
		AdmittedAt time.Time `json:"admitted_at"`
		Bucket     *int      `json:"bucket"`
	}
	okEvidence := json.Unmarshal(c.Evidence, &ev) == nil
	b, n, err := r.staleBucket(ctx, c, ev.Bucket)
	if err != nil {
		return "", err
	}
	l, err := r.reserved(ctx, c.RequestID, b, n)
	if err != nil {
		return "", err
	}
	g := seckill.Grab{RequestID: c.RequestID, UserID: l.Owner, SessionID: *c.SessionID, PrizeID: *c.PrizeID, Bucket: b, AdmittedAt: c.FirstSeen}
	if okEvidence && !ev.AdmittedAt.IsZero() {
		g.AdmittedAt = ev.AdmittedAt
	}
	if err := r.stillApplies(ctx, g); err != nil {
		return "", err
	}
	msg, err := event.EncodeGrab(g)
	if err != nil {
		return "", err
	}
	msg.Headers = append(msg.Headers, kafka.Header{Key: HeaderReplayedBy, Value: []byte("case:" + strconv.FormatInt(c.ID, 10))})
	w := r.Writers[r.GrabTopic]
	if err := w.WriteMessages(ctx, msg); err != nil {
		return "", fmt.Errorf("produce to %s: %w", r.GrabTopic, err)
	}
	return "grab " + g.RequestID + " produced to " + r.GrabTopic, nil
}

// staleBucket is the stock bucket a stale case's reservation is on: the one its evidence
// names (recorded since buckets exist, for bucket 1 and above), else its user's home bucket
// among the prize's N (bucket 0 for a prize without buckets). It returns N too, which
// names the bucket's keys.
func (r *Replayer) staleBucket(ctx context.Context, c store.CaseDetail, named *int) (b, n int, err error) {
	if named != nil && *named == 0 {
		return 0, 1, nil
	}
	st, err := r.Stocks.Stock(ctx, *c.SessionID, *c.PrizeID)
	if errors.Is(err, seckill.ErrNotFound) {
		return 0, 1, nil // the stale replay never needed the row: bucket 0, as before buckets
	} else if err != nil {
		return 0, 0, fmt.Errorf("check stock row: %w", err)
	}
	n = st.BucketCount()
	if named != nil {
		return *named, n, nil
	}
	return stock.HomeBucket(c.UserID, n), n, nil
}

// bucketExists refuses a grab of a stock bucket its session×prize does not have: the
// consumer dead-letters it again (store.ErrNoBucket), whatever Redis holds.
// It returns the prize's N, which names the bucket's keys.
func (r *Replayer) bucketExists(ctx context.Context, g seckill.Grab) (int, error) {
	st, err := r.Stocks.Stock(ctx, g.SessionID, g.PrizeID)
	if errors.Is(err, seckill.ErrNotFound) {
		return 1, nil // refused below, with the reason a person can act on
	} else if err != nil {
		return 0, fmt.Errorf("check stock row: %w", err)
	}
	n := st.BucketCount()
	if g.Bucket >= n {
		return 0, refuse("the message names stock bucket %d, session %d prize %d has %d buckets (0 to %d); the consumer would dead-letter it again",
			g.Bucket, g.SessionID, g.PrizeID, n, n-1)
	}
	return n, nil
}

// reserved returns what Redis holds for requestID on stock bucket b's keys, and refuses
// unless it is a pending reservation: a grab whose reservation is gone (settled, or lost
// with the keys and rebuilt from MySQL without it) no longer has its unit set aside, and
// replaying it would sell that unit a second time.
func (r *Replayer) reserved(ctx context.Context, requestID string, b, n int) (stock.Lookup, error) {
	l, err := r.Gate.LookupBucket(ctx, requestID, b, n)
	if err != nil {
		return stock.Lookup{}, fmt.Errorf("look up reservation %s: %w", requestID, err)
	}
	if !l.Found || l.Status.State != "queued" {
		return stock.Lookup{}, refuse("Redis no longer holds %s as a pending reservation (state %q; keys live: %v): its unit may have been sold again since, so it is not replayed; resolve the case with a note",
			requestID, l.Status.State, l.Live)
	}
	return l, nil
}

// stillApplies refuses a grab that already has its order.
func (r *Replayer) stillApplies(ctx context.Context, g seckill.Grab) error {
	orders, err := r.Orders.Existing(ctx, []string{g.RequestID})
	if err != nil {
		return fmt.Errorf("check order of %s: %w", g.RequestID, err)
	}
	if o, ok := orders[g.RequestID]; ok {
		return refuse("order %d (%s) already exists for %s; nothing to replay", o.ID, o.Status, g.RequestID)
	}
	return nil
}
