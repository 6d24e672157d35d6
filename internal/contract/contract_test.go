package contract_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
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

// The admin document's window_start and window_end describe the date-times the gateway
// takes (time.Parse with RFC 3339, after upper-casing the t and z it allows), judged by a
// validator that asserts formats as Schemathesis does: a string the document admits and the
// gateway refuses (0000-00-00T00:00:00Z did) is a 400 a client reading only the document
// cannot foresee, and the fuzzer reports it. (The gateway also takes offsets RFC 3339 does
// not, +24:00 or +23:60; the document keeps to RFC 3339.)
func TestAdminDateTimesAreRealDateTimes(t *testing.T) {
	doc, err := contract.JSONValue(contract.Read(t, contract.AdminAPI))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const url = "https://seckill.invalid/openapi-admin.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"window_start", "window_end"} {
		schema, err := c.Compile(url + "#/components/schemas/ActivityInput/properties/" + field)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{
			"2026-11-29T10:00:00Z", "2026-11-29t10:00:00z", "2028-02-29T23:59:59.999+08:00", "0001-01-01T00:00:00-05:30",
			"0000-00-00T00:00:00Z", "2026-00-10T10:00:00Z", "2026-13-10T10:00:00Z", "2026-01-00T10:00:00Z",
			"2026-01-32T10:00:00Z", "2026-02-30T10:00:00Z", "2026-02-29T10:00:00Z", "2026-04-31T10:00:00Z",
			"2026-11-29T24:00:00Z", "2026-11-29T10:60:00Z", "2026-11-29T23:59:60Z", "2026-11-29T10:00:00+99:00",
			"2026-11-29T10:00Z", "2026-11-29 10:00:00Z", "2026-11-29T10:00:00", "2026-11-29T10:00:00.Z",
		} {
			_, parseErr := time.Parse(time.RFC3339, strings.ToUpper(v))
			docErr := schema.Validate(v)
			if (parseErr == nil) != (docErr == nil) {
				t.Errorf("%s %q: the document says %v, the gateway %v", field, v, docErr, parseErr)
			}
		}
	}
}
