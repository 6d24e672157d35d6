package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/readahead"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

type batchProcessor interface {
	Process(ctx context.Context, msgs []kafka.Message) error
}

// groupConsumer runs the consumer group on the grab topic: one worker per assigned
// partition, each processing its messages in offset order, batch by batch, committing a
// batch's offsets only after the transactions covering it committed.
type groupConsumer struct {
	brokers   []string
	dialer    *kafka.Dialer // SASL and TLS (event.Security); nil: plaintext
	groupID   string
	topic     string
	batchSize int
	batchWait time.Duration
	// readAhead is how many bytes of messages a partition's worker holds read and not yet
	// processed (pkg/readahead): its batch and the next ones.
	readAhead int64
	proc      batchProcessor
	// events, when set, publishes the orders' events of each partition's batches from
	// memory; proc must then be a sourcedProcessor. Nil: proc.Process alone (feedback).
	events *batchEvents
	log    *slog.Logger
}

// sourcedProcessor persists a batch under a grab partition's claim and returns the events
// to publish from memory: *processor.
type sourcedProcessor interface {
	ProcessFrom(ctx context.Context, msgs []kafka.Message, src *store.GrabSource) ([]store.OutboxEvent, error)
}

// Run consumes until ctx ends. On shutdown every worker finishes its in-flight batch and
// commits it before the group is left.
func (c *groupConsumer) Run(ctx context.Context) error {
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                    c.groupID,
		Brokers:               c.brokers,
		Dialer:                c.dialer,
		Topics:                []string{c.topic},
		StartOffset:           kafka.FirstOffset, // a new group reads everything admitted so far
		HeartbeatInterval:     time.Second,
		SessionTimeout:        10 * time.Second,
		RebalanceTimeout:      10 * time.Second,
		WatchPartitionChanges: true,
		// kafka-go waits 5 s after a failed join before trying again. On a brand-new cluster
		// the first joins fail while the broker creates and loads __consumer_offsets
		// ("coordinator not available"); a second is enough between tries.
		JoinGroupBackoff: time.Second,
		// Why a join fails (coordinator not available, group rebalancing, authorization)
		// is only known to kafka-go: its error log says it, under the group's name.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.log.Warn("consumer group: "+fmt.Sprintf(msg, args...), "group_id", c.groupID, "topic", c.topic)
		}),
	})
	if err != nil {
		return fmt.Errorf("consumer group %s on %s: %w", c.groupID, c.topic, err)
	}
	defer group.Close() // leaves the group, so partitions move to the others at once
	for {
		start := time.Now()
		gen, err := c.next(ctx, group)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return nil
			}
			c.log.Warn("consumer group: next generation failed; retrying", "group_id", c.groupID, "error", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		var wg sync.WaitGroup
		for _, a := range gen.Assignments[c.topic] {
			wg.Add(1)
			partition, offset := a.ID, a.Offset
			gen.Start(func(gctx context.Context) {
				defer wg.Done()
				c.work(ctx, gctx, gen, partition, offset)
			})
		}
		c.log.Info("consumer group generation", "group_id", c.groupID, "topic", c.topic, "generation_id", gen.ID,
			"member_id", gen.MemberID, "partitions", len(gen.Assignments[c.topic]),
			"waited", time.Since(start).Round(time.Millisecond).String())
		// Shutdown: wait for the workers to commit their last batch while the generation is
		// still valid, then return (Close leaves the group).
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-ctx.Done():
			<-done
			return nil
		case <-done:
			// The generation ended (rebalance); join the next one.
		}
	}
}

// joinReportEvery is how often a consumer still waiting for its partitions says so.
const joinReportEvery = 5 * time.Second

// next waits for the group's next generation. A join normally takes the broker's initial
// rebalance delay (3 s by default) for a new group; until it completes nothing is consumed,
// so a wait longer than joinReportEvery is logged, with how long it has lasted, rather than
// passing in silence (kafka-go's error log, above, says why each try failed).
func (c *groupConsumer) next(ctx context.Context, group *kafka.ConsumerGroup) (*kafka.Generation, error) {
	start := time.Now()
	tick := time.NewTicker(joinReportEvery)
	defer tick.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				c.log.Warn("consumer group: waiting for the coordinator to assign partitions",
					"group_id", c.groupID, "topic", c.topic, "waited", time.Since(start).Round(time.Millisecond).String())
			}
		}
	}()
	return group.Next(ctx)
}

// work consumes one partition. stop ends it between batches: the process shutting down
// (ctx) or the generation ending (gctx, a rebalance).
func (c *groupConsumer) work(ctx, gctx context.Context, gen *kafka.Generation, partition int, offset int64) {
	// kafka-go's reader fetches in the background into a queue counted in messages; it is
	// kept a few deep, and the read-ahead that lets the next batch arrive while the current
	// one is in its transaction (two batches of events) is bounded in bytes instead: a
	// queue of 2,000 messages held 2 GB of a topic's largest (pkg/readahead).
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: c.brokers, Dialer: c.dialer, Topic: c.topic, Partition: partition,
		MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 100 * time.Millisecond,
		QueueCapacity: readerQueue,
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		c.log.Error("set offset", "partition", partition, "offset", offset, "error", err.Error())
		return
	}
	stop, cancel := context.WithCancel(gctx)
	defer cancel()
	context.AfterFunc(ctx, cancel)
	ahead, err := readahead.New(r, c.readAhead, 2*c.batchSize)
	if err != nil {
		c.log.Error("read-ahead", "partition", partition, "error", err.Error())
		return
	}
	go ahead.Run(stop)
	// Runs before r.Close: the read-ahead stops fetching from the reader first.
	defer func() { cancel(); ahead.Wait() }()
	// Offsets are committed after the batches they cover were persisted, at most every
	// commitEvery while busy (a commit is a Kafka round trip the hot path need not wait for
	// each batch) and at once when the partition goes idle or the worker stops. A crash in
	// between only redelivers batches the database already has, which it dedupes.
	const commitEvery = 100 * time.Millisecond
	var pending int64 = -1
	lastCommit := time.Now()
	commit := func() bool {
		if pending < 0 {
			return true
		}
		if err := gen.CommitOffsets(map[string]map[int]int64{c.topic: {partition: pending}}); err != nil {
			// The generation ended: the next owner gets these batches again.
			c.log.Warn("commit failed", "partition", partition, "offset", pending, "error", err.Error())
			return false
		}
		pending, lastCommit = -1, time.Now()
		return true
	}
	defer commit()
	process := c.proc.Process
	// idle is how long a fetch may wait for a first message before the worker gets to do
	// something else (0: as long as it takes), and settle what it does then.
	idle, settle := func() time.Duration { return 0 }, func() {}
	if c.events != nil {
		// One publisher per partition worker: batches in offset order, each batch's events
		// published and recorded while the next batch is persisted, in batch order.
		pe := c.events.open(partition)
		defer pe.close()
		sp := c.proc.(sourcedProcessor)
		process = func(ctx context.Context, batch []kafka.Message) error { return pe.run(ctx, sp, batch) }
		// A partition whose events are not all recorded (its lock is elsewhere, a publish
		// failed) must not wait for the next grab to be recovered: an idle partition retries.
		idle = func() time.Duration {
			if pe.settled() {
				return 0
			}
			return c.events.retryEvery
		}
		settle = func() { pe.idle(ctx) }
	}
	for {
		batch := c.fetch(stop, ahead, idle())
		if len(batch) == 0 && stop.Err() == nil {
			settle()
		}
		if len(batch) > 0 {
			// Processing uses ctx, not stop: a rebalance lets the in-flight batch finish.
			if err := process(ctx, batch); err != nil {
				c.log.Warn("batch not committed; it will be redelivered", "partition", partition,
					"first_offset", batch[0].Offset, "error", err.Error())
				return
			}
			ahead.Release(batch)
			last := batch[len(batch)-1]
			pending = last.Offset + 1
			idle := last.HighWaterMark <= last.Offset+1
			if (idle || time.Since(lastCommit) >= commitEvery) && !commit() {
				return
			}
		}
		if stop.Err() != nil {
			return
		}
	}
}

// readerQueue is kafka-go's own queue, in messages: enough to hand messages on to the
// read-ahead without a wait, few enough that the topic's largest cannot fill memory.
const readerQueue = 8

// fetch waits for a first message, then takes more until batchSize messages or batchWait
// has passed since the first, or nothing when idle (> 0) passed without a message. The
// read-ahead's byte budget bounds the batch too: when it is spent, the batch is what was
// read by batchWait. Fetching never commits; a cancelled fetch loses nothing.
func (c *groupConsumer) fetch(stop context.Context, r *readahead.Reader, idle time.Duration) []kafka.Message {
	fctx := stop
	if idle > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(stop, idle)
		defer cancel()
	}
	first, err := r.Fetch(fctx)
	if err != nil {
		return nil
	}
	batch := []kafka.Message{first}
	if c.batchWait <= 0 {
		return batch
	}
	wctx, cancel := context.WithTimeout(stop, c.batchWait)
	defer cancel()
	for len(batch) < c.batchSize {
		m, err := r.Fetch(wctx)
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	return batch
}
