package readahead

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// endless hands out messages of the given value sizes in turn, forever, counting them.
type endless struct {
	sizes   []int
	fetched atomic.Int64
}

func (e *endless) FetchMessage(ctx context.Context) (kafka.Message, error) {
	if err := ctx.Err(); err != nil {
		return kafka.Message{}, err
	}
	n := e.fetched.Add(1) - 1
	return kafka.Message{Offset: n, Value: make([]byte, e.sizes[int(n)%len(e.sizes)])}, nil
}

// settle waits until the source has stopped being read from (the reader is blocked on
// its budget or depth) and returns how many messages it handed out.
func settle(src *endless) int64 {
	last := int64(-1)
	for n := src.fetched.Load(); n != last; n = src.fetched.Load() {
		last = n
		time.Sleep(20 * time.Millisecond)
	}
	return last
}

// A source of 1 MiB messages, a worker that takes them and does not give them back: the
// reader holds no more than its budget (plus the one message it waits to place), however
// deep its queue, and reads on as bytes are released.
func TestHoldsAtMostTheBudget(t *testing.T) {
	src := &endless{sizes: []int{1 << 20}}
	r, err := New(src, 4<<20, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if n := settle(src); n != 5 { // 4 within the budget, the 5th fetched and waiting for room
		t.Fatalf("%d messages of 1 MiB read ahead with a 4 MiB budget, want 4 held and 1 waiting", n)
	}
	var batch []kafka.Message
	for range 3 {
		m, err := r.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, m)
	}
	if n := settle(src); n != 5 {
		t.Fatalf("taking messages without releasing them read %d, want still 5", n)
	}
	r.Release(batch)
	if n := settle(src); n != 8 {
		t.Fatalf("after releasing 3 MiB, %d messages read, want 8", n)
	}
}

// Small messages are read as deep as the depth allows: the budget bounds bytes, not the
// read-ahead of ordinary events.
func TestSmallMessagesFillTheDepth(t *testing.T) {
	src := &endless{sizes: []int{300}}
	r, _ := New(src, 4<<20, 2000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if n := settle(src); n != 2001 {
		t.Fatalf("%d events of 300 bytes read ahead, want the depth (2000) and one waiting", n)
	}
}

// A message larger than the whole budget is read, alone, rather than never.
func TestAMessageLargerThanTheBudgetIsReadAlone(t *testing.T) {
	src := &endless{sizes: []int{10 << 20, 10}}
	r, _ := New(src, 1<<20, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go r.Run(ctx)
	m, err := r.Fetch(ctx)
	if err != nil || len(m.Value) != 10<<20 {
		t.Fatalf("first message %d bytes, %v", len(m.Value), err)
	}
	if n := settle(src); n != 2 {
		t.Fatalf("%d read while the large one is held, want it and one waiting", n)
	}
	r.Release([]kafka.Message{m})
	if m, err := r.Fetch(ctx); err != nil || len(m.Value) != 10 {
		t.Fatalf("second message %d bytes, %v", len(m.Value), err)
	}
}

// Run returns when its context ends; Fetch then hands out what was read and says stopped.
func TestStopsWithItsContext(t *testing.T) {
	src := &endless{sizes: []int{1}}
	r, _ := New(src, 1<<20, 3)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { r.Run(ctx); close(ran) }()
	settle(src)
	cancel()
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	got := 0
	for {
		_, err := r.Fetch(context.Background())
		if errors.Is(err, ErrStopped) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 3 {
		t.Fatalf("%d messages handed out after the stop, want the 3 read", got)
	}
	if _, err := New(nil, 1, 1); err == nil {
		t.Fatal("a reader without a source was made")
	}
}
