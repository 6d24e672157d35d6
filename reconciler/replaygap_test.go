package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// A compensation topic recreated under the reconciler (its offsets start again below the
// stored positions) is replayed from its first offset, and the lost positions are
// exception cases, once; before, the replay waited silently for the end to pass the old
// positions, skipping every event below them.
func TestReplayFromRecreatedTopicIsACaseAndReplays(t *testing.T) {
	e := newRecEnv(t, 5, 1)
	g := e.grab("a", false)
	e.publish(e.topics.Compensation.Name, g)
	for p := 0; p < e.topics.Compensation.Partitions; p++ {
		if err := e.db.Exec("INSERT INTO replay_offsets (topic, partition_id, next_offset, fence, updated_at) VALUES (?, ?, 100, 0, ?)",
			e.topics.Compensation.Name, p, time.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
	}
	rep, err := e.once()
	if err != nil {
		t.Fatalf("run: %v %+v", err, jobOf(rep, "compensation"))
	}
	if c := jobOf(rep, "compensation").Summary; c["succeeded"] != 1 {
		t.Fatalf("compensation %+v: the event on the recreated topic was not replayed", c)
	}
	if e.orders("request_id = ? AND status = 'succeeded'", g.RequestID) != 1 {
		t.Fatal("no order for the replayed grab")
	}
	cases := e.cases(seckill.CaseReplayGap)
	if len(cases) != e.topics.Compensation.Partitions {
		t.Fatalf("%d replay_gap cases, want one per partition (%d)", len(cases), e.topics.Compensation.Partitions)
	}
	// Reported once: the replay goes on from the new positions.
	rep, err = e.once()
	if err != nil || jobOf(rep, "compensation").Summary["gaps"] != 0 {
		t.Fatalf("second run: %v %+v", err, jobOf(rep, "compensation"))
	}
	for _, c := range e.cases(seckill.CaseReplayGap) {
		if c.Seen != 1 {
			t.Fatalf("case %s seen %d times, want once", c.Key, c.Seen)
		}
	}
}

// memOffsets are stored replay positions in memory.
type memOffsets map[int]int64

func (m memOffsets) ReplayOffsets(context.Context, string) (map[int]int64, error) {
	out := map[int]int64{}
	for p, o := range m {
		out[p] = o
	}
	return out, nil
}

func (m memOffsets) SaveReplayOffset(_ context.Context, _ lease.Fence, _ string, partition int, next int64) error {
	m[partition] = next
	return nil
}

type fixedBounds map[int]event.PartitionOffsets

func (b fixedBounds) Offsets(context.Context, string) (map[int]event.PartitionOffsets, error) {
	return b, nil
}

type caseLog []store.CaseReport

func (l *caseLog) Record(_ context.Context, _ time.Time, reports ...store.CaseReport) error {
	*l = append(*l, reports...)
	return nil
}

// A stored replay position that retention removed, or that lies past the end of a
// recreated topic, is an exception case with what a person needs, recorded once.
func TestReplayGapIsACase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored int64
		bounds event.PartitionOffsets
		reason string
		lost   any
	}{
		{"retention removed unread events", 2, event.PartitionOffsets{First: 5, End: 5}, "retention", int64(3)},
		{"topic recreated", 9, event.PartitionOffsets{First: 0, End: 0}, "recreated", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offsets := memOffsets{0: tc.stored}
			var cases caseLog
			j := &compensationJob{bounds: fixedBounds{0: tc.bounds}, offsets: offsets, cases: &cases,
				topic: event.Topic{Name: "t.seckill.compensation", Partitions: 1}, budget: time.Second,
				metrics: newCompensationMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), now: time.Now}
			for run := 1; run <= 2; run++ {
				if _, err := j.Run(context.Background(), lease.Fence{Name: "l", Number: 1}); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
			if len(cases) != 1 {
				t.Fatalf("%d cases after two runs, want 1: %+v", len(cases), cases)
			}
			c := cases[0]
			ev, _ := c.Evidence.(map[string]any)
			if c.Kind != seckill.CaseReplayGap || ev["reason"] != tc.reason || ev["stored_offset"] != tc.stored || ev["lost_events"] != tc.lost {
				t.Fatalf("case %+v", c)
			}
			if offsets[0] != tc.bounds.First {
				t.Fatalf("stored position %d, want the first offset %d", offsets[0], tc.bounds.First)
			}
		})
	}
}

// savedOffsets records every replay position saved: one a batch.
type savedOffsets struct {
	memOffsets
	saves []int64
}

func (s *savedOffsets) SaveReplayOffset(ctx context.Context, f lease.Fence, topic string, partition int, next int64) error {
	s.saves = append(s.saves, next)
	return s.memOffsets.SaveReplayOffset(ctx, f, topic, partition, next)
}

// largeMessages hands out n messages of 1 MiB that are not compensation events.
type largeMessages struct{ next, n int64 }

func (l *largeMessages) FetchMessage(ctx context.Context) (kafka.Message, error) {
	if l.next >= l.n {
		<-ctx.Done()
		return kafka.Message{}, ctx.Err()
	}
	l.next++
	return kafka.Message{Offset: l.next - 1, Value: make([]byte, 1<<20)}, nil
}

func (*largeMessages) Close() error { return nil }

type poisonLog []event.Poison

func (p *poisonLog) Write(_ context.Context, poison ...event.Poison) error {
	*p = append(*p, poison...)
	return nil
}

type noSettle struct{}

func (noSettle) Settle(context.Context, []stock.SettleBatch) (int64, error) { return 0, nil }

// A replay batch is bounded in bytes as well as in number: 20 messages of 1 MiB (anyone
// who can write the topic can write them) are replayed 4 MiB at a time, not 20 MiB in one
// batch, and each is dead-lettered.
func TestReplayBatchesAreBoundedInBytes(t *testing.T) {
	offsets := &savedOffsets{memOffsets: memOffsets{}}
	var dead poisonLog
	src := &largeMessages{n: 20}
	j := &compensationJob{bounds: fixedBounds{0: {First: 0, End: 20}}, offsets: offsets, cases: &caseLog{},
		open:        func(int, int64) (partitionReader, error) { return src, nil },
		write:       writepath.New(nil, noSettle{}, retry.Default(), nil, slog.New(slog.DiscardHandler), time.Now),
		deadLetters: &dead, topic: event.Topic{Name: "t.seckill.compensation", Partitions: 1}, budget: time.Minute,
		metrics: newCompensationMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), now: time.Now}
	if _, err := j.Run(context.Background(), lease.Fence{Name: "l", Number: 1}); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 20 || offsets.memOffsets[0] != 20 {
		t.Fatalf("%d dead-lettered, replayed to %d; want 20 and 20", len(dead), offsets.memOffsets[0])
	}
	if len(offsets.saves) != 5 || offsets.saves[0] != 4 {
		t.Fatalf("batches ended at %v, want every 4 MiB (4, 8, ..., 20)", offsets.saves)
	}
}
