package event_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

type counter float64

func (c *counter) Add(n float64) { *c += counter(n) }

// Messages as this package builds them, written to and read back from the real broker, are
// what docs/api/asyncapi.yaml says: a grab event, compensation and dead-letter envelopes
// (of a grab event, of an undecodable message, of a compensation event, of an undecodable
// feedback message), order events v1 and v2 (their payload as NewOrderEvent and
// NewFollowEvent build it; consumer/contract_test.go checks the relay's framing), and
// downstream feedback as EncodeFeedback writes it. Changing a field, a header or a document fragment makes the check fail.
func TestMessagesMatchTheContract(t *testing.T) {
	events := contract.LoadEvents(t)
	brokers, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	writer := func(topic event.Topic) *kafka.Writer {
		w, err := event.NewWriter(brokers, topic.Name, event.WithSecurity(stacktest.KafkaSecurity(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	read := func(topic event.Topic, want int) []kafka.Message {
		msgs, err := harness.ReadTopic(ctx, brokers, topic)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != want {
			t.Fatalf("%s holds %d messages, want %d", topic.Name, len(msgs), want)
		}
		return msgs
	}

	g := seckill.Grab{RequestID: seckill.RequestID(7, 3, "alice-key-0001"), UserID: "alice", SessionID: 7, PrizeID: 3,
		AdmittedAt: time.Now()}
	grab, err := event.EncodeGrab(g)
	if err != nil {
		t.Fatal(err)
	}
	// A traced grab: its trace context goes with it into the envelopes.
	grab.Headers = append(grab.Headers, kafka.Header{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		kafka.Header{Key: "tracestate", Value: []byte("vendor=x")})
	if err := writer(topics.Grab).WriteMessages(ctx, grab, kafka.Message{Key: []byte("7:3"), Value: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	var grabRead, poison kafka.Message
	for _, m := range read(topics.Grab, 2) {
		if string(m.Value) == "not json" {
			poison = m
		} else {
			grabRead = m
		}
	}
	if err := writer(topics.Compensation).WriteMessages(ctx, event.Compensation(grabRead, errors.New("conflict storm"), 5)); err != nil {
		t.Fatal(err)
	}
	compRead := read(topics.Compensation, 1)[0]
	var written counter
	dls, err := event.NewDeadLetters(writer(topics.DeadLetter), &written, topics.DeadLetter.MaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	_, decodeErr := event.DecodeGrab(poison.Value)
	if err := dls.Write(ctx, event.Poison{Msg: poison, Cause: decodeErr},
		event.Poison{Msg: compRead, Cause: errors.New("no such stock row")}); err != nil {
		t.Fatal(err)
	}
	read(topics.DeadLetter, 2) // both dead letters are on the topic before the feedback's
	// Downstream's feedback, written as a downstream system would (EncodeFeedback), and a
	// message on that topic that is not feedback at all.
	paidMsg, err := event.EncodeFeedback(seckill.Feedback{RequestID: g.RequestID, Kind: seckill.FeedbackPaid, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cancelMsg, err := event.EncodeFeedback(seckill.Feedback{RequestID: g.RequestID, Kind: seckill.FeedbackCancelled,
		Reason: seckill.ReasonMerchantCancelled, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := writer(topics.Feedback).WriteMessages(ctx, paidMsg, cancelMsg,
		kafka.Message{Key: []byte(g.RequestID), Value: []byte(`{"v":1,"type":"order.shipped"}`)}); err != nil {
		t.Fatal(err)
	}
	var feedback []kafka.Message
	var feedbackPoison kafka.Message
	for _, m := range read(topics.Feedback, 3) {
		if _, err := event.DecodeFeedback(m.Value); err != nil {
			feedbackPoison = m
		} else {
			feedback = append(feedback, m)
		}
	}
	if err := dls.Write(ctx, event.Poison{Msg: feedbackPoison, Cause: errors.New("unknown type")}); err != nil {
		t.Fatal(err)
	}
	deadRead := read(topics.DeadLetter, 3)

	order := func(o seckill.Order) kafka.Message {
		b, err := json.Marshal(event.NewOrderEvent(o))
		if err != nil {
			t.Fatal(err)
		}
		ev := event.NewOrderEvent(o)
		return kafka.Message{Key: []byte(o.RequestID), Value: b,
			Headers: []kafka.Header{{Key: "event-id", Value: []byte(ev.EventID)}, {Key: "schema", Value: []byte("order.v1")}}}
	}
	now := time.Now()
	created := order(seckill.Order{ID: 42, RequestID: g.RequestID, UserID: "alice", SessionID: 7, PrizeID: 3,
		Status: seckill.OrderSucceeded, AdmittedAt: now, CreatedAt: now})
	rejected := order(seckill.Order{ID: 43, RequestID: seckill.RequestID(7, 3, "bob-key-00001"), UserID: "bob", SessionID: 7,
		PrizeID: 3, Status: seckill.OrderRejected, Reason: seckill.ReasonSoldOut, AdmittedAt: now, CreatedAt: now})
	follow := func(typ, reason string) kafka.Message {
		o := seckill.Order{ID: 42, RequestID: g.RequestID, UserID: "alice", SessionID: 7, PrizeID: 3,
			Status: seckill.OrderCancelled, Reason: seckill.ReasonPaymentTimeout, AdmittedAt: now, CreatedAt: now}
		ev := event.NewFollowEvent(o, typ, reason, now)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(o.RequestID), Value: b,
			Headers: []kafka.Header{{Key: "event-id", Value: []byte(ev.EventID)}, {Key: "schema", Value: []byte(ev.Schema())}}}
	}
	cancelled := follow(event.OrderCancelled, string(seckill.ReasonPaymentTimeout))
	refund := follow(event.OrderRefundRequired, string(seckill.CasePaidAfterCancel))
	// An order of stock bucket 2 carries its bucket (an additive field of v1 and v2).
	createdInBucket := order(seckill.Order{ID: 45, RequestID: seckill.RequestID(7, 3, "dave-key-0001"), UserID: "dave",
		SessionID: 7, PrizeID: 3, Bucket: 2, Status: seckill.OrderSucceeded, AdmittedAt: now, CreatedAt: now})
	cancelledInBucket := func() kafka.Message {
		o := seckill.Order{ID: 45, RequestID: seckill.RequestID(7, 3, "dave-key-0001"), UserID: "dave", SessionID: 7, PrizeID: 3,
			Bucket: 2, Status: seckill.OrderCancelled, Reason: seckill.ReasonBuyerCancelled, AdmittedAt: now, CreatedAt: now}
		ev := event.NewFollowEvent(o, event.OrderCancelled, string(seckill.ReasonBuyerCancelled), now)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Key: []byte(o.RequestID), Value: b,
			Headers: []kafka.Header{{Key: "event-id", Value: []byte(ev.EventID)}, {Key: "schema", Value: []byte(ev.Schema())}}}
	}()
	for _, m := range []kafka.Message{createdInBucket, cancelledInBucket} {
		if !strings.Contains(string(m.Value), `"bucket":2`) {
			t.Fatalf("an order of bucket 2 encoded without it: %s", m.Value)
		}
	}
	if strings.Contains(string(created.Value), `"bucket"`) {
		t.Fatalf("an order of a prize without buckets names a bucket: %s", created.Value)
	}
	// A cancelled order's creation event is still order.created.
	createdOfCancelled := order(seckill.Order{ID: 44, RequestID: seckill.RequestID(7, 3, "carol-key-001"), UserID: "carol",
		SessionID: 7, PrizeID: 3, Status: seckill.OrderCancelled, Reason: seckill.ReasonBuyerCancelled, AdmittedAt: now, CreatedAt: now})

	// What a traced order event (and downstream's feedback propagating it) carries.
	traced := []kafka.Header{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01")},
		{Key: "tracestate", Value: []byte("vendor=x")}}
	valid := []struct {
		name, channel string
		m             kafka.Message
	}{
		{"grab event", "grab", grabRead},
		{"compensation of a grab event", "compensation", compRead},
		{"dead letter of an undecodable message", "deadLetter", deadRead[0]},
		{"dead letter of a compensation event", "deadLetter", deadRead[1]},
		{"order created", "order", created},
		{"order rejected", "order", rejected},
		{"order cancelled (v2)", "order", cancelled},
		{"order refund required (v2)", "order", refund},
		{"creation event of an order cancelled since", "order", createdOfCancelled},
		{"order created in stock bucket 2", "order", createdInBucket},
		{"order cancelled in stock bucket 2 (v2)", "order", cancelledInBucket},
		{"feedback: paid", "orderFeedback", feedback[0]},
		{"feedback: cancelled", "orderFeedback", feedback[1]},
		{"dead letter of an undecodable feedback message", "deadLetter", deadRead[2]},
		{"order created, traced", "order", withHeaders(created, append(created.Headers[:2:2], traced...))},
		{"order cancelled (v2), traced", "order", withHeaders(cancelled, append(cancelled.Headers[:2:2], traced...))},
		{"feedback, traced by downstream", "orderFeedback", withHeaders(feedback[0], append(feedback[0].Headers[:1:1], traced...))},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			if err := events.Check(tc.channel, tc.m); err != nil {
				t.Fatal(err)
			}
		})
	}

	// The same real messages, changed the way drift would change them, are refused.
	for _, tc := range []struct {
		name, channel string
		m             kafka.Message
	}{
		{"order event with a traceparent that is no trace context", "order",
			withHeaders(created, append(created.Headers[:2:2], kafka.Header{Key: "traceparent", Value: []byte("span-7")}))},
		{"grab event with a renamed field", "grab", withPayload(t, grabRead, func(p map[string]any) {
			p["requestId"] = p["request_id"]
			delete(p, "request_id")
		})},
		{"grab event with an extra field", "grab", withPayload(t, grabRead, func(p map[string]any) { p["quantity"] = 1 })},
		{"grab event of schema v2", "grab", withPayload(t, grabRead, func(p map[string]any) { p["v"] = 2 })},
		{"grab event with a local time", "grab", withPayload(t, grabRead, func(p map[string]any) {
			p["admitted_at"] = time.Now().In(time.FixedZone("x", 3600)).Format(time.RFC3339Nano)
		})},
		{"grab event without its schema header", "grab", withHeaders(grabRead, nil)},
		{"grab event keyed by request id", "grab", withKey(grabRead, g.RequestID)},
		{"compensation without attempts", "compensation", withHeaders(compRead, compRead.Headers[:len(compRead.Headers)-1])},
		{"dead letter with its original headers", "deadLetter", withHeaders(deadRead[0], append(deadRead[0].Headers, grabRead.Headers...))},
		{"rejected order without a reason", "order", withPayload(t, rejected, func(p map[string]any) { delete(p, "reason") })},
		{"created order with a reason", "order", withPayload(t, created, func(p map[string]any) { p["reason"] = "limit" })},
		{"order event id of another outcome", "order", withPayload(t, created, func(p map[string]any) {
			p["event_id"] = event.OrderEventID(g.RequestID, seckill.OrderRejected)
		})},
		{"cancelled event under the v1 schema header", "order", withHeaders(cancelled, []kafka.Header{cancelled.Headers[0], {Key: "schema", Value: []byte("order.v1")}})},
		{"cancelled event as schema v1", "order", withPayload(t, cancelled, func(p map[string]any) { p["v"] = 1 })},
		{"cancelled event without a reason", "order", withPayload(t, cancelled, func(p map[string]any) { delete(p, "reason") })},
		{"cancelled event for a rejection's reason", "order", withPayload(t, cancelled, func(p map[string]any) { p["reason"] = "sold_out" })},
		{"cancelled event with the refund's id", "order", withPayload(t, cancelled, func(p map[string]any) { p["event_id"] = "order:" + g.RequestID + ":refund_required" })},
		{"refund event with a cancellation reason", "order", withPayload(t, refund, func(p map[string]any) { p["reason"] = "payment_timeout" })},
		{"cancelled event without its time", "order", withPayload(t, cancelled, func(p map[string]any) { delete(p, "occurred_at") })},
		{"feedback: paid with a reason", "orderFeedback", withPayload(t, feedback[0], func(p map[string]any) { p["reason"] = "buyer_cancelled" })},
		{"feedback: cancelled without a reason", "orderFeedback", withPayload(t, feedback[1], func(p map[string]any) { delete(p, "reason") })},
		{"feedback: cancelled for the pipeline's own reason", "orderFeedback", withPayload(t, feedback[1], func(p map[string]any) { p["reason"] = "payment_timeout" })},
		{"feedback: an unknown type", "orderFeedback", withPayload(t, feedback[0], func(p map[string]any) { p["type"] = "order.refunded" })},
		{"feedback keyed by session:prize", "orderFeedback", withKey(feedback[0], "7:3")},
		{"feedback without its schema header", "orderFeedback", withHeaders(feedback[0], nil)},
		{"grab event on the order channel", "order", withTopic(grabRead, "")},
		{"grab event read from another topic", "grab", withTopic(grabRead, topics.Order.Name)},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			err := events.Check(tc.channel, tc.m)
			if err == nil {
				t.Fatal("the contract accepted it")
			}
			t.Logf("refused: %.300s", err)
		})
	}

	// A document with a deliberately wrong fragment (a field renamed) refuses the real
	// grab event: the check reads the document, not a copy of the code's idea of it.
	raw := contract.Mutated(t, contract.EventsAPI, func(doc map[string]any) {
		schema := contract.At(doc, "components", "schemas", "GrabEvent")
		props := schema["properties"].(map[string]any)
		props["admittedAt"] = props["admitted_at"]
		delete(props, "admitted_at")
		schema["required"] = []any{"v", "request_id", "user_id", "session_id", "prize_id", "admittedAt"}
	})
	wrong, err := contract.NewEvents(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Check("grab", grabRead); err == nil {
		t.Fatal("a document that renamed admitted_at accepted the real grab event")
	}
}

func withPayload(t *testing.T, m kafka.Message, change func(p map[string]any)) kafka.Message {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(m.Value, &p); err != nil {
		t.Fatal(err)
	}
	change(p)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	m.Value = b
	return m
}

func withHeaders(m kafka.Message, h []kafka.Header) kafka.Message {
	m.Headers = h
	return m
}

func withTopic(m kafka.Message, topic string) kafka.Message {
	m.Topic = topic
	return m
}

func withKey(m kafka.Message, key string) kafka.Message {
	m.Key = []byte(key)
	return m
}
