// Package event defines the Kafka topics, the event schemas and their codecs, and the
// producer/consumer wiring every deployable shares.
package event

import (
	"fmt"
	"strings"
)

// Topic is one Kafka topic the pipeline uses, how many partitions it is created with, and
// the largest record batch it accepts.
type Topic struct {
	Name       string
	Partitions int
	// MaxMessageBytes is the topic's max.message.bytes, set explicitly when the topic is
	// created (0: the brokers' message.max.bytes). The dead-letter copy of a message is
	// sized from the dead-letter topic's (see DeadLetters): a copy Kafka refuses would stop
	// the partition it came from.
	MaxMessageBytes int
}

// DefaultMaxMessageBytes is every topic's max.message.bytes: 1 MiB, about Kafka's own
// default (1,048,588), written down so the pipeline knows it rather than assumes it. Grab,
// order and feedback events are a few hundred bytes; anything near this size is poison.
const DefaultMaxMessageBytes = 1 << 20

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
		Grab:         Topic{Name: name("grab"), Partitions: 6, MaxMessageBytes: DefaultMaxMessageBytes},
		Order:        Topic{Name: name("order"), Partitions: 6, MaxMessageBytes: DefaultMaxMessageBytes},
		Compensation: Topic{Name: name("compensation"), Partitions: 3, MaxMessageBytes: DefaultMaxMessageBytes},
		DeadLetter:   Topic{Name: name("deadletter"), Partitions: 1, MaxMessageBytes: DefaultMaxMessageBytes},
		Feedback:     Topic{Name: name("order-feedback"), Partitions: 6, MaxMessageBytes: DefaultMaxMessageBytes},
	}
}

// All lists the topics in a fixed order.
func (t Topics) All() []Topic {
	return []Topic{t.Grab, t.Order, t.Compensation, t.DeadLetter, t.Feedback}
}

// Validate reports a topic without a name or partitions, or with a max.message.bytes too
// small for a dead letter's envelope (below 64 KiB).
func (t Topics) Validate() error {
	var bad []string
	for _, tp := range t.All() {
		if strings.TrimSpace(tp.Name) == "" || tp.Partitions < 1 || tp.MaxMessageBytes < 0 ||
			(tp.MaxMessageBytes > 0 && tp.MaxMessageBytes < 64<<10) {
			bad = append(bad, fmt.Sprintf("%q/%d (max.message.bytes %d)", tp.Name, tp.Partitions, tp.MaxMessageBytes))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("invalid topics: %s", strings.Join(bad, ", "))
	}
	return nil
}
