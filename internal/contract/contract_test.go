package contract_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.yaml.in/yaml/v4"

	"github.com/seckill-pipeline/seckill/internal/contract"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// Every document conforms to its specification's meta-schema and compiles.
func TestDocumentsConformToTheirSpecifications(t *testing.T) {
	for _, name := range []string{contract.PublicAPI, contract.AdminAPI} {
		t.Run(name, func(t *testing.T) {
			a := contract.LoadAPI(t, name)
			if len(a.Documented()) < 10 {
				t.Fatalf("%s documents only %v", name, a.Documented())
			}
		})
	}
	t.Run(contract.EventsAPI, func(t *testing.T) { contract.LoadEvents(t) })
}

// The meta-schema checks are not vacuous: a deliberately broken copy of each document is
// refused.
func TestBrokenDocumentsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func([]byte) error
		doc   []byte
	}{
		{"openapi: a response without a description", contract.CheckOpenAPI, contract.Mutated(t, contract.PublicAPI, func(d map[string]any) {
			delete(contract.At(d, "paths", "/healthz", "get", "responses", "200"), "description")
		})},
		{"openapi: a path that does not start with /", contract.CheckOpenAPI, contract.Mutated(t, contract.PublicAPI, func(d map[string]any) {
			contract.At(d, "paths")["healthz"] = contract.At(d, "paths", "/healthz")
		})},
		{"openapi: version 3.0", contract.CheckOpenAPI, contract.Mutated(t, contract.PublicAPI, func(d map[string]any) { d["openapi"] = "3.0.3" })},
		{"openapi: a parameter in no location", contract.CheckOpenAPI, contract.Mutated(t, contract.PublicAPI, func(d map[string]any) {
			contract.At(d, "components", "parameters", "IdempotencyKey")["in"] = "body"
		})},
		{"asyncapi: an unknown channel field", contract.CheckAsyncAPI, contract.Mutated(t, contract.EventsAPI, func(d map[string]any) {
			contract.At(d, "channels", "grab")["topic"] = "seckill.grab"
		})},
		{"asyncapi: a 2.x operation action", contract.CheckAsyncAPI, contract.Mutated(t, contract.EventsAPI, func(d map[string]any) {
			contract.At(d, "operations", "sendGrab")["action"] = "publish"
		})},
		{"asyncapi: a kafka binding version that does not exist", contract.CheckAsyncAPI, contract.Mutated(t, contract.EventsAPI, func(d map[string]any) {
			contract.At(d, "channels", "grab", "bindings", "kafka")["bindingVersion"] = "9.9.9"
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check(tc.doc)
			if err == nil {
				t.Fatal("the broken document passed the meta-schema")
			}
			t.Logf("refused: %.300s", err)
		})
	}
	// And an unbroken round trip passes, so the refusals above are the mutations' doing.
	if err := contract.CheckOpenAPI(contract.Mutated(t, contract.PublicAPI, func(map[string]any) {})); err != nil {
		t.Fatal(err)
	}
	if err := contract.CheckAsyncAPI(contract.Mutated(t, contract.EventsAPI, func(map[string]any) {})); err != nil {
		t.Fatal(err)
	}
}

// The document has exactly the topics pkg/event creates, with their partition counts.
func TestChannelsAreTheTopics(t *testing.T) {
	e := contract.LoadEvents(t)
	ids := map[string]string{"seckill.grab": "grab", "seckill.order": "order",
		"seckill.compensation": "compensation", "seckill.deadletter": "deadLetter", "seckill.order-feedback": "orderFeedback"}
	var want []string
	for _, topic := range event.DefaultTopics("").All() {
		id, ok := ids[topic.Name]
		if !ok {
			t.Fatalf("topic %s has no channel id here: document it in %s, then here", topic.Name, contract.EventsAPI)
		}
		want = append(want, id)
		ch := e.Channel(id)
		if ch == nil || ch.Address != topic.Name || ch.Partitions != topic.Partitions {
			t.Fatalf("topic %s (%d partitions) is documented as %+v", topic.Name, topic.Partitions, ch)
		}
	}
	got := e.ChannelIDs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("channels %v, topics %v", got, want)
	}
}

// The examples the document shows integrators are valid messages.
func TestEventExamplesAreValid(t *testing.T) {
	e := contract.LoadEvents(t)
	var d map[string]any
	if err := yaml.Unmarshal(contract.Read(t, contract.EventsAPI), &d); err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, ch := range map[string]string{"Grab": "grab", "Order": "order", "OrderFollow": "order", "OrderFeedback": "orderFeedback"} {
		examples, _ := contract.At(d, "components", "messages", name)["examples"].([]any)
		for _, ex := range examples {
			ex := ex.(map[string]any)
			payload, _ := json.Marshal(ex["payload"])
			var headers []kafka.Header
			for k, v := range ex["headers"].(map[string]any) {
				headers = append(headers, kafka.Header{Key: k, Value: []byte(v.(string))})
			}
			p := ex["payload"].(map[string]any)
			key := p["request_id"].(string)
			if ch == "grab" {
				key = strings.Join([]string{jsonNumber(p["session_id"]), jsonNumber(p["prize_id"])}, ":")
			}
			if err := e.Check(ch, kafka.Message{Key: []byte(key), Value: payload, Headers: headers}); err != nil {
				t.Errorf("example %s of %s: %v", ex["name"], name, err)
			}
			n++
		}
	}
	if n < 7 {
		t.Fatalf("%d examples checked", n)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
