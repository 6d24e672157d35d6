package main

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// What the consumer writes is what docs/api/asyncapi.yaml says: the order events its outbox
// relay publishes (created, rejected sold_out, rejected limit; cancelled and refund required
// after downstream feedback) and the dead letters of an undecodable grab or feedback
// message, from the consumer process (run, as main does); and the
// compensation events of a group whose persistence ran out of retries, from the processor.
func TestConsumerMessagesMatchTheContract(t *testing.T) {
	events := contract.LoadEvents(t)

	t.Run("orders and dead letters", func(t *testing.T) {
		t.Parallel()
		// MySQL has 2 units for 3 users' admissions, and u0 grabbed twice (the second
		// admission never went through Redis): u0 and u1 succeed, u0's second is refused by
		// the per-user guard (limit), u2 finds no stock (sold_out).
		e := newEnv(t, 2, 3, 1)
		msgs := e.admit(t, 3)
		dup, err := event.EncodeGrab(seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, "dup-key-0001"), UserID: "u0",
			SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		out := []kafka.Message{msgs[0], dup, msgs[1], msgs[2], {Key: msgs[0].Key, Value: []byte("not json")}}
		for i := range out {
			out[i].Topic, out[i].Offset = "", 0
		}
		if err := e.writer(t, e.topics.Grab.Name).WriteMessages(e.ctx, out...); err != nil {
			t.Fatal(err)
		}
		stop, logs := runConsumer(t, e)
		outbox := store.NewOutbox(e.db)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			pending, err := outbox.CountPending(e.ctx)
			if err == nil && e.count(t, "1=1") == 4 && pending == 0 && len(readAll(t, e.brokers, e.topics.DeadLetter)) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("orders, order events and the dead letter not all written in 30s; the consumer's log:\n%s", logs)
			}
		}
		stop()

		outcomes := map[string]int{}
		for _, m := range readAll(t, e.brokers, e.topics.Order) {
			if err := events.Check("order", m); err != nil {
				t.Errorf("the consumer's order event breaks the contract: %v", err)
			}
			var ev event.OrderEvent
			if err := json.Unmarshal(m.Value, &ev); err != nil {
				t.Fatalf("order event %s: %v", m.Value, err)
			}
			outcomes[ev.Type+" "+ev.Reason]++
		}
		if want := map[string]int{"order.created ": 2, "order.rejected limit": 1, "order.rejected sold_out": 1}; !maps.Equal(outcomes, want) {
			t.Fatalf("order events %v, want %v", outcomes, want)
		}
		for _, m := range readAll(t, e.brokers, e.topics.DeadLetter) {
			if err := events.Check("deadLetter", m); err != nil {
				t.Errorf("the consumer's dead letter breaks the contract: %v", err)
			}
		}
	})

	t.Run("feedback: cancelled and refund events, dead letter", func(t *testing.T) {
		t.Parallel()
		// Two orders; downstream cancels the first, then reports it paid (a refund is
		// required), and reports the second paid; one message is not feedback at all.
		e := newEnv(t, 2, 2, 1)
		rids := e.sold(t, 2)
		var out []kafka.Message
		for _, f := range []seckill.Feedback{
			{RequestID: rids[0], Kind: seckill.FeedbackCancelled, Reason: seckill.ReasonMerchantCancelled, At: time.Now()},
			{RequestID: rids[0], Kind: seckill.FeedbackPaid, At: time.Now()},
			{RequestID: rids[1], Kind: seckill.FeedbackPaid, At: time.Now()},
		} {
			m, err := event.EncodeFeedback(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := events.Check("orderFeedback", m); err != nil {
				t.Errorf("feedback as EncodeFeedback writes it breaks the contract: %v", err)
			}
			out = append(out, m)
		}
		out = append(out, kafka.Message{Key: []byte(rids[1]), Value: []byte(`{"v":1,"type":"order.paid"}`)})
		if err := e.writer(t, e.topics.Feedback.Name).WriteMessages(e.ctx, out...); err != nil {
			t.Fatal(err)
		}
		stop, logs := runConsumer(t, e)
		var msgs []kafka.Message
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			msgs = readAll(t, e.brokers, e.topics.Order)
			if len(msgs) == 4 && len(readAll(t, e.brokers, e.topics.DeadLetter)) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d order events (want 2 created, 1 cancelled, 1 refund) and the dead letter not all written in 30s; the consumer's log:\n%s", len(msgs), logs)
			}
		}
		stop()
		types := map[string]int{}
		for _, m := range msgs {
			if err := events.Check("order", m); err != nil {
				t.Errorf("the consumer's order event breaks the contract: %v", err)
			}
			var ev event.OrderEvent
			if err := json.Unmarshal(m.Value, &ev); err != nil {
				t.Fatalf("order event %s: %v", m.Value, err)
			}
			types[ev.Type+" "+ev.Reason]++
		}
		want := map[string]int{"order.created ": 2, "order.cancelled merchant_cancelled": 1, "order.refund_required paid_after_cancel": 1}
		if !maps.Equal(types, want) {
			t.Fatalf("order events %v, want %v", types, want)
		}
		for _, m := range readAll(t, e.brokers, e.topics.DeadLetter) {
			if err := events.Check("deadLetter", m); err != nil {
				t.Errorf("the consumer's dead letter of feedback breaks the contract: %v", err)
			}
		}
	})

	t.Run("compensation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 10, 10, 1)
		msgs := e.admit(t, 2)
		opt, _ := bumper(e, -1) // every transaction conflicts
		if err := e.processor(t, store.NewOrders(e.db, opt)).Process(e.ctx, msgs); err != nil {
			t.Fatal(err)
		}
		comp := readAll(t, e.brokers, e.topics.Compensation)
		if len(comp) != 2 {
			t.Fatalf("%d compensation events, want 2", len(comp))
		}
		for _, m := range comp {
			if err := events.Check("compensation", m); err != nil {
				t.Errorf("the consumer's compensation event breaks the contract: %v", err)
			}
		}
	})
}

// runConsumer runs the consumer process in-process on e's topics and database; the
// returned stop ends it and waits.
func runConsumer(t *testing.T, e *env) (stop func(), logs *syncBuffer) {
	t.Helper()
	return runConsumerWith(t, e, nil)
}

// runConsumerWith is runConsumer with more settings (extra).
func runConsumerWith(t *testing.T, e *env, extra map[string]string) (stop func(), logs *syncBuffer) {
	t.Helper()
	addr := stacktest.FreeAddr(t)
	vars := e.consumerVars(t, addr)
	maps.Copy(vars, extra)
	getenv := stacktest.Getenv(vars)
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, getenv, logs) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("consumer: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("consumer did not stop within 30s")
		}
	}
	t.Cleanup(stop)
	stacktest.WaitHTTP(t, "http://"+addr+"/readyz", 20*time.Second)
	return stop, logs
}
