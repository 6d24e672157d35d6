package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/lease"
	"github.com/seckill-pipeline/seckill/pkg/retry"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
	"github.com/seckill-pipeline/seckill/pkg/writepath"
)

// offsetLister reads a topic's first retained and end offsets per partition.
type offsetLister interface {
	Offsets(ctx context.Context, topic string) (map[int]event.PartitionOffsets, error)
}

// deadLetterWriter sends what can never be persisted to the dead-letter topic (and counts
// it); *event.DeadLetters is one.
type deadLetterWriter interface {
	Write(ctx context.Context, poison ...event.Poison) error
}

// replayOffsets stores how far the compensation topic was replayed, fenced by the lease.
type replayOffsets interface {
	ReplayOffsets(ctx context.Context, topic string) (map[int]int64, error)
	SaveReplayOffset(ctx context.Context, f lease.Fence, topic string, partition int, next int64) error
}

type producer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// partitionReader reads one partition from an offset; kafka-go's *kafka.Reader without a
// group is one.
type partitionReader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	Close() error
}

// compensationJob replays the compensation topic: each grab is persisted again (the
// database dedupes by request id, so replaying twice changes stock once). When the database
// definitively says no (sold out), the rejection is stored, the Redis reservation released
// and the user sees "rejected".
//
// It reads partitions directly from offsets it keeps in MySQL, under the lease's fence,
// instead of joining a consumer group: a group's first join waits for the broker's
// group.initial.rebalance.delay.ms (3 s by default), which a short run used to spend
// entirely, leaving the backlog untouched run after run. Partition reads start at once,
// on any broker, and --once knows exactly how much there is to replay.
type compensationJob struct {
	bounds      offsetLister
	offsets     replayOffsets
	open        func(partition int, offset int64) (partitionReader, error)
	write       *writepath.Writer
	deadLetters deadLetterWriter
	cases       caseRecorder // a group whose replay fails is a case until a run gets past it
	topic       event.Topic
	budget      time.Duration // one run's replay time; the rest waits for the next run
	metrics     compensationMetrics
	log         *slog.Logger
	now         func() time.Time
}

func (compensationJob) Name() string { return "compensation" }

// positions reads, per partition, the next offset to replay and the end offset.
func (j *compensationJob) positions(ctx context.Context) (map[int]event.Position, error) {
	stored, err := j.offsets.ReplayOffsets(ctx, j.topic.Name)
	if err != nil {
		return nil, err
	}
	offs, err := j.bounds.Offsets(ctx, j.topic.Name)
	if err != nil {
		return nil, fmt.Errorf("compensation topic offsets: %w", err)
	}
	return event.Positions(offs, stored), nil
}

// Backlog returns how many compensation events wait to be replayed.
func (j *compensationJob) Backlog(ctx context.Context) (int64, error) {
	pos, err := j.positions(ctx)
	if err != nil {
		return 0, err
	}
	n := event.Backlog(pos)
	j.metrics.backlog.Set(float64(n))
	return n, nil
}

func (j *compensationJob) Run(ctx context.Context, fence lease.Fence) (result, error) {
	sum := map[string]int64{"replayed": 0, "succeeded": 0, "rejected": 0, "existing": 0, "dead_lettered": 0, "backlog": 0, "gaps": 0}
	pos, err := j.positions(ctx)
	if err != nil {
		return result{Summary: sum}, err
	}
	sum["backlog"] = event.Backlog(pos)
	j.metrics.backlog.Set(float64(sum["backlog"]))
	deadline := time.Now().Add(j.budget)
	var errs []error
	for part, p := range pos {
		if p.Clamped != event.NotClamped {
			if err := j.gap(ctx, fence, part, p); err != nil {
				errs = append(errs, fmt.Errorf("partition %d: %w", part, err))
				continue
			}
			sum["gaps"]++
		}
		if p.Next >= p.End {
			continue
		}
		n, err := j.replayPartition(ctx, fence, part, p, deadline, sum)
		sum["backlog"] -= n
		if err != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", part, err))
		}
	}
	j.metrics.backlog.Set(float64(sum["backlog"]))
	if sum["backlog"] > 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%d compensation events left after the %s replay budget; the next run goes on", sum["backlog"], j.budget))
	}
	return result{Summary: sum}, errors.Join(errs...)
}

// replayBatchBytes bounds a replay batch's messages in bytes as well as in number: anyone
// who can write the topic can fill 200 messages with a topic's largest (200 MB).
const replayBatchBytes = 4 << 20

// replayPartition replays one partition from p.Next up to p.End (what was there when the
// run began) in batches, saving the offset after each, and returns how many it replayed.
func (j *compensationJob) replayPartition(ctx context.Context, fence lease.Fence, part int, p event.Position, deadline time.Time, sum map[string]int64) (int64, error) {
	r, err := j.open(part, p.Next)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var done int64
	next := p.Next
	for next < p.End && time.Now().Before(deadline) {
		var batch []kafka.Message
		size := 0
		for len(batch) < 200 && size < replayBatchBytes && next < p.End {
			// The messages exist (below the end offset read at the start), so a fetch that
			// takes long means the broker is unwell, not that the topic is empty.
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := r.FetchMessage(fctx)
			cancel()
			if err != nil {
				if len(batch) == 0 {
					return done, fmt.Errorf("read offset %d: %w", next, err)
				}
				break
			}
			batch = append(batch, m)
			size += len(m.Key) + len(m.Value)
			next = m.Offset + 1
		}
		if err := j.replay(ctx, batch, sum); err != nil {
			return done, err
		}
		if err := j.offsets.SaveReplayOffset(ctx, fence, j.topic.Name, part, next); err != nil {
			return done, err
		}
		done += int64(len(batch))
		sum["replayed"] += int64(len(batch))
	}
	return done, nil
}

// gap records a stored replay position that could not be read from (retention removed the
// messages after it before they were replayed, or the topic was recreated and its offsets
// start again) as an exception case, then stores the position the replay goes on from, so
// the gap is reported once: the grabs in it were never replayed, and only a person can
// find them (the stale job re-publishes those whose reservation Redis still holds).
func (j *compensationJob) gap(ctx context.Context, fence lease.Fence, part int, p event.Position) error {
	evidence := map[string]any{"topic": j.topic.Name, "partition": part, "stored_offset": p.Stored,
		"first_offset": p.Next, "end_offset": p.End, "reason": string(p.Clamped)}
	detail := fmt.Sprintf("%s/%d: replay position %d is gone (%s); replay goes on from %d", j.topic.Name, part, p.Stored, p.Clamped, p.Next)
	if p.Clamped == event.ClampRetention {
		evidence["lost_events"] = p.Next - p.Stored
		detail = fmt.Sprintf("%s/%d: retention removed %d compensation events (offsets %d to %d) before they were replayed",
			j.topic.Name, part, p.Next-p.Stored, p.Stored, p.Next-1)
	}
	if err := j.cases.Record(ctx, j.now(), store.CaseReport{Kind: seckill.CaseReplayGap,
		Key: fmt.Sprintf("%s/%d@%d", j.topic.Name, part, p.Stored), Detail: detail, Evidence: evidence}); err != nil {
		return err
	}
	j.log.ErrorContext(ctx, "compensation replay position lost; exception case recorded", "topic", j.topic.Name, "partition", part,
		"stored_offset", p.Stored, "first_offset", p.Next, "end_offset", p.End, "reason", string(p.Clamped))
	return j.offsets.SaveReplayOffset(ctx, fence, j.topic.Name, part, p.Next)
}

func (j *compensationJob) replay(ctx context.Context, batch []kafka.Message, sum map[string]int64) error {
	groups, poison := writepath.GroupGrabs(batch)
	var settle []stock.SettleBatch
	for _, g := range groups {
		// Traced like the consumer's batches: each grab's span continues the context the
		// compensation message kept from the grab (event.Compensation).
		res, err := j.write.PersistGroup(ctx, g, nil)
		var giveUp *writepath.GiveUp
		if errors.As(err, &giveUp) && giveUp.Action == retry.DeadLetter {
			for _, m := range g.Msgs {
				poison = append(poison, event.Poison{Msg: m, Cause: giveUp.Err})
			}
			continue
		}
		if err != nil {
			err = fmt.Errorf("replay %s: %w (offset not saved; the next run retries)", g.Key, err)
			if cerr := j.cases.Record(ctx, j.now(), compensationCase(g.Key, g.Msgs, err)); cerr != nil {
				j.log.WarnContext(ctx, "record the failing compensation as an exception case failed", "error", cerr.Error())
			}
			return err
		}
		writepath.ObserveAdmission(j.metrics.admitToOrder, g, res, writepath.PathCompensation, j.now())
		for _, o := range res.Outcomes {
			result := "rejected"
			switch {
			case o.Before:
				result = "existing"
			case o.Status == seckill.OrderSucceeded:
				result = "succeeded"
			}
			sum[result]++
			j.metrics.replayed.WithLabelValues(result).Inc()
		}
		settle = append(settle, j.write.Settlement(ctx, g.Key, res))
	}
	if err := j.deadLetters.Write(ctx, poison...); err != nil {
		return err
	}
	sum["dead_lettered"] += int64(len(poison))
	j.write.Settle(ctx, settle)
	return nil
}

// compensationCase is the exception case of a compensation group that failed to replay. It
// is keyed by where the group starts, so the same stuck group is one case however many runs
// fail on it; the job retries it every run, and a person fixes the cause (nothing to replay).
func compensationCase(k seckill.SessionPrize, msgs []kafka.Message, cause error) store.CaseReport {
	first := msgs[0]
	rids := make([]string, 0, min(len(msgs), 20))
	for _, m := range msgs[:min(len(msgs), 20)] {
		if g, err := event.DecodeGrab(m.Value); err == nil {
			rids = append(rids, g.RequestID)
		}
	}
	return store.CaseReport{Kind: seckill.CaseCompensationFailing,
		Key:       fmt.Sprintf("%s/%d@%d", first.Topic, first.Partition, first.Offset),
		SessionID: k.Session, PrizeID: k.Prize, Detail: cause.Error(),
		Evidence: map[string]any{"topic": first.Topic, "partition": first.Partition, "first_offset": first.Offset,
			"events": len(msgs), "request_ids": rids, "error": cause.Error()}}
}
