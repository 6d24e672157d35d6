// Package event defines the Kafka topics, the event schemas and their codecs, and the
// producer/consumer wiring every deployable shares.
package event

import (
	"fmt"
	"strings"
)

// Topic is one Kafka topic the pipeline uses and how many partitions it is created with.
type Topic struct {
	Name       string
	Partitions int
}

// Topics names the pipeline's topics. It is the one place names and partition counts live:
// the local stack creates them from here (deploy/local/kafkainit) and the services read them.
type Topics struct {
	Grab         Topic // admitted grabs, keyed by session:prize; one writer per prize
	Order        Topic // order created / rejected events for downstream systems
	Compensation Topic // grabs whose persistence ran out of retries
	DeadLetter   Topic // messages that could not be decoded
	Feedback     Topic // order paid / cancelled, from downstream order systems, keyed by request id
}

// DefaultTopics returns the topic layout with an optional name prefix, so tests and
// parallel stacks can get their own topics ("" gives the production names).
func DefaultTopics(prefix string) Topics {
	name := func(s string) string {
		if prefix == "" {
			return "seckill." + s
		}
		return prefix + ".seckill." + s
	}
	return Topics{
		// Grab partitions bound consumer parallelism; a session×prize always lands on one of
		// them, so more partitions spread different prizes over more workers.
		Grab:         Topic{Name: name("grab"), Partitions: 6},
		Order:        Topic{Name: name("order"), Partitions: 6},
		Compensation: Topic{Name: name("compensation"), Partitions: 3},
		DeadLetter:   Topic{Name: name("deadletter"), Partitions: 1},
		Feedback:     Topic{Name: name("order-feedback"), Partitions: 6},
	}
}

// All lists the topics in a fixed order.
func (t Topics) All() []Topic {
	return []Topic{t.Grab, t.Order, t.Compensation, t.DeadLetter, t.Feedback}
}

// Validate reports a topic without a name or partitions.
func (t Topics) Validate() error {
	var bad []string
	for _, tp := range t.All() {
		if strings.TrimSpace(tp.Name) == "" || tp.Partitions < 1 {
			bad = append(bad, fmt.Sprintf("%q/%d", tp.Name, tp.Partitions))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("invalid topics: %s", strings.Join(bad, ", "))
	}
	return nil
}
