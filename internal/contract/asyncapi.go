package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/segmentio/kafka-go"
)

// Events is the AsyncAPI document of the Kafka topics, compiled: for every channel, the
// key, header and payload schemas of its messages.
type Events struct {
	channels map[string]*Channel
}

// Channel is one topic as the document describes it.
type Channel struct {
	ID         string
	Address    string // the topic name without SECKILL_TOPIC_PREFIX
	Partitions int    // from the Kafka channel binding
	messages   []*message
}

type message struct {
	name                  string
	json                  bool // contentType application/json: the payload is validated decoded
	key, headers, payload *jsonschema.Schema
}

const docURL = "urn:seckill:asyncapi"

// LoadEvents loads docs/api's AsyncAPI document, checks it against the AsyncAPI 3.0.0
// meta-schema and compiles its message schemas.
func LoadEvents(tb testing.TB) *Events {
	tb.Helper()
	raw := Read(tb, EventsAPI)
	if err := CheckAsyncAPI(raw); err != nil {
		tb.Fatalf("%s does not conform to the AsyncAPI 3.0.0 meta-schema: %v", EventsAPI, err)
	}
	e, err := NewEvents(raw)
	if err != nil {
		tb.Fatalf("%s: %v", EventsAPI, err)
	}
	return e
}

// NewEvents compiles an AsyncAPI 3.0 document (YAML or JSON). Its schemas are AsyncAPI
// Schema Objects, that is JSON Schema draft-07; formats (date-time) are asserted.
func NewEvents(raw []byte) (*Events, error) {
	doc, err := JSONValue(raw)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	channels, _ := lookup(doc, "/channels").(map[string]any)
	if len(channels) == 0 {
		return nil, errors.New("no channels")
	}
	e := &Events{channels: map[string]*Channel{}}
	for id, v := range channels {
		ch, _ := v.(map[string]any)
		addr, _ := ch["address"].(string)
		out := &Channel{ID: id, Address: addr}
		if n, ok := lookup(ch, "/bindings/kafka/partitions").(json.Number); ok {
			p, _ := n.Int64()
			out.Partitions = int(p)
		}
		msgs, _ := ch["messages"].(map[string]any)
		if addr == "" || len(msgs) == 0 {
			return nil, fmt.Errorf("channel %s: an address and messages are required", id)
		}
		for name := range msgs {
			m, err := compileMessage(c, doc, "/channels/"+id+"/messages/"+name)
			if err != nil {
				return nil, fmt.Errorf("channel %s message %s: %w", id, name, err)
			}
			out.messages = append(out.messages, m)
		}
		e.channels[id] = out
	}
	return e, nil
}

// compileMessage follows the message's $ref (a Message Object is not a schema) and compiles
// its schemas by their location in the document, so their own $refs resolve.
func compileMessage(c *jsonschema.Compiler, doc any, ptr string) (*message, error) {
	for range 10 {
		obj, _ := lookup(doc, ptr).(map[string]any)
		if obj == nil {
			return nil, fmt.Errorf("%s: not found", ptr)
		}
		ref, ok := obj["$ref"].(string)
		if !ok {
			break
		}
		if !strings.HasPrefix(ref, "#/") {
			return nil, fmt.Errorf("%s: only local $refs are supported, not %s", ptr, ref)
		}
		ptr = strings.TrimPrefix(ref, "#")
	}
	obj, _ := lookup(doc, ptr).(map[string]any)
	ct, _ := obj["contentType"].(string)
	if ct == "" {
		ct, _ = lookup(doc, "/defaultContentType").(string)
	}
	m := &message{name: ptr, json: ct == "application/json"}
	for _, s := range []struct {
		into **jsonschema.Schema
		at   string
	}{{&m.key, "/bindings/kafka/key"}, {&m.headers, "/headers"}, {&m.payload, "/payload"}} {
		if lookup(obj, s.at) == nil {
			return nil, fmt.Errorf("%s%s: a schema is required", ptr, s.at)
		}
		sch, err := c.Compile(docURL + "#" + ptr + s.at)
		if err != nil {
			return nil, err
		}
		*s.into = sch
	}
	return m, nil
}

// lookup resolves a JSON pointer in v (nil when absent).
func lookup(v any, ptr string) any {
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
	}
	return v
}

// Channel returns a channel of the document by id (grab, order, compensation, deadLetter).
func (e *Events) Channel(id string) *Channel { return e.channels[id] }

// ChannelIDs lists the document's channels.
func (e *Events) ChannelIDs() []string {
	var out []string
	for id := range e.channels {
		out = append(out, id)
	}
	return out
}

// Check validates a message read from Kafka (or about to be written) against a channel:
// its topic must be the channel's address (under any prefix) when set, and its key, its
// headers (as a JSON object of UTF-8 strings, each name once) and its payload must match
// one of the channel's messages.
func (e *Events) Check(channelID string, m kafka.Message) error {
	ch := e.channels[channelID]
	if ch == nil {
		return fmt.Errorf("no channel %q in the document", channelID)
	}
	if m.Topic != "" && m.Topic != ch.Address && !strings.HasSuffix(m.Topic, "."+ch.Address) {
		return fmt.Errorf("message of topic %s checked against channel %s (%s)", m.Topic, channelID, ch.Address)
	}
	var errs []error
	for _, msg := range ch.messages {
		err := msg.check(m)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("as %s: %w", msg.name, err))
	}
	return fmt.Errorf("%s message (key %q, value %.300q): %w", channelID, m.Key, m.Value, errors.Join(errs...))
}

func (msg *message) check(m kafka.Message) error {
	var key any
	if m.Key != nil {
		if !utf8.Valid(m.Key) {
			return errors.New("key is not UTF-8")
		}
		key = string(m.Key)
	}
	if err := msg.key.Validate(key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	headers := map[string]any{}
	for _, h := range m.Headers {
		if _, dup := headers[h.Key]; dup {
			return fmt.Errorf("header %q appears twice", h.Key)
		}
		if !utf8.Valid(h.Value) {
			return fmt.Errorf("header %q is not UTF-8", h.Key)
		}
		headers[h.Key] = string(h.Value)
	}
	if err := msg.headers.Validate(headers); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	var payload any = string(m.Value)
	if msg.json {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Value))
		if err != nil {
			return fmt.Errorf("payload is not JSON: %w", err)
		}
		payload = v
	}
	if err := msg.payload.Validate(payload); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	return nil
}
