package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// tool runs one operator command in process and decodes its JSON output.
func (e *recEnv) tool(env map[string]string, args ...string) (map[string]any, error) {
	e.t.Helper()
	all := maps.Clone(e.env)
	maps.Copy(all, env)
	var out bytes.Buffer
	err := run(e.ctx, append(args, "--json"), stacktest.Getenv(all), &out, io.Discard)
	var got map[string]any
	if out.Len() > 0 {
		if jerr := json.Unmarshal(out.Bytes(), &got); jerr != nil {
			e.t.Fatalf("%v: output %q: %v (run error %v)", args, out.String(), jerr, err)
		}
	}
	return got, err
}

// failing names the checks of a drained / add-partitions answer that did not pass.
func failing(got map[string]any) []string {
	var out []string
	checks, _ := got["checks"].([]any)
	for _, c := range checks {
		m, _ := c.(map[string]any)
		if ok, _ := m["ok"].(bool); !ok {
			out = append(out, fmt.Sprint(m["name"]))
		}
	}
	return out
}

// The grab topic gets more partitions between sales, as docs/operators.md (Adding grab
// partitions) says: refused while a session is open and while anything is still in flight
// (a reservation Kafka never got), done once drained; the reconciler then refuses the old
// setting and runs with the new one; the consumer, left running, reads the new partitions;
// and across the change no grab is lost and none is persisted or announced twice.
func TestAddGrabPartitionsBetweenSales(t *testing.T) {
	e := newRecEnv(t, 100, 1)
	e.startConsumer()
	var admitted []seckill.Grab
	for i := 0; i < 20; i++ {
		admitted = append(admitted, e.grab(fmt.Sprintf("before-%02d", i), true))
	}
	e.waitOrders(20)
	e.waitSettled()
	// A grab whose event never reached Kafka (its gateway died after the admission).
	// Admitted staleAge ago: older than SECKILL_STALE_AFTER when the reconciler looks at it.
	admitted = append(admitted, e.grabAt("unsent", false, time.Now().Add(-staleAge)))

	got, err := e.tool(nil, "drained")
	if !errors.Is(err, errFoundProblems) || got["drained"] != false || !strings.Contains(fmt.Sprint(failing(got)), "no_session_open") {
		t.Fatalf("drained during a sale: %v %v; want refused for the open session", err, got)
	}
	if err := e.db.Exec("UPDATE sessions SET ends_at = NOW(3) - INTERVAL 1 SECOND WHERE id = ?", e.session).Error; err != nil {
		t.Fatal(err)
	}
	got, err = e.tool(nil, "drained")
	if !errors.Is(err, errFoundProblems) || fmt.Sprint(failing(got)) != "[no_pending_reservations]" {
		t.Fatalf("drained with a reservation Kafka never got: %v %v", err, got)
	}
	// The reconciler re-publishes it (stale after 300 ms here), the consumer persists it.
	if _, err := e.once(); err != nil {
		t.Fatal(err)
	}
	e.waitOrders(21)
	e.waitSettled()
	if got, err = e.tool(nil, "drained"); err != nil || got["drained"] != true {
		t.Fatalf("drained once the reservation is an order: %v %v", err, got)
	}
	// The partitions are added with Kafka's own tool (kafka-go's request does nothing on Kafka 4).
	alter := exec.CommandContext(e.ctx, filepath.Join(harness.Root(), "deploy/local/kafka-tool"), "topics",
		"--bootstrap-server", e.brokers[0], "--alter", "--topic", e.topics.Grab.Name, "--partitions", "8")
	if out, err := alter.CombinedOutput(); err != nil {
		t.Fatalf("kafka-topics --alter: %v\n%s", err, out)
	}
	admin := stacktest.KafkaAdmin(t, e.brokers)
	// The tool returns once the controller accepted the change; the broker's metadata follows.
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := admin.Partitions(e.ctx, e.topics.Grab.Name)
		if err == nil && n == 8 {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("grab topic has %d partitions (%v) 30 s after kafka-topics --alter, want 8", n, err)
		}
	}
	if got, err = e.tool(nil, "drained"); !errors.Is(err, errFoundProblems) || fmt.Sprint(failing(got)) != "[partitions_match_setting]" {
		t.Fatalf("drained after the change, setting not updated: %v %v", err, got)
	}
	// Still configured for 6: the reconciler refuses to act at all.
	if err := run(e.ctx, []string{"--once"}, stacktest.Getenv(e.env), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "partition counts differ") {
		t.Fatalf("reconciler with the old SECKILL_GRAB_PARTITIONS: %v, want refused", err)
	}
	e.env["SECKILL_GRAB_PARTITIONS"] = "8"
	if rep, err := e.once(); err != nil || rep.Lease != "held" {
		t.Fatalf("reconciler with SECKILL_GRAB_PARTITIONS=8: %v %+v", err, rep)
	}
	if got, err = e.tool(nil, "drained"); err != nil || got["drained"] != true {
		t.Fatalf("drained with SECKILL_GRAB_PARTITIONS=8: %v %v", err, got)
	}

	// The next sale, on prizes some of which hash to the new partitions.
	now := time.Now().UTC()
	cat := store.NewCatalog(e.db, func() time.Time { return now })
	act := seckill.Activity{Name: "next sale", WindowStart: now.Add(-time.Minute), WindowEnd: now.Add(time.Hour),
		Interval: time.Hour, SessionLength: time.Hour, PerUserLimit: 1}
	// 32 prizes: the chance that none hashes to partition 6 or 7 is (6/8)^32, about 1e-4.
	for i := 0; i < 32; i++ {
		act.Prizes = append(act.Prizes, seckill.Prize{Name: fmt.Sprintf("p%d", i), StockPerSession: 5})
	}
	created, err := cat.CreateActivity(e.ctx, act)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := cat.Sessions(e.ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	stocks, err := cat.Stocks(e.ctx, sessions[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, st := range stocks {
			k := stock.KeysFor(st.SessionID, st.PrizeID)
			e.rdb.Del(context.Background(), k.Meta, k.Users, k.Reserved, k.Outcomes, k.Fence, k.Returned)
		}
	})
	if _, err := e.gate.Load(e.ctx, stocks, now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	moved, onNew := 0, 0
	var after []seckill.Grab
	for _, st := range stocks {
		key := event.PartitionKey(st.SessionID, st.PrizeID)
		if event.PartitionOf(key, 6) != event.PartitionOf(key, 8) {
			moved++
		}
		if event.PartitionOf(key, 8) >= 6 {
			onNew++
		}
		for u := 0; u < 2; u++ {
			g := seckill.Grab{RequestID: seckill.RequestID(st.SessionID, st.PrizeID, fmt.Sprintf("key-after-%04d", u)),
				UserID: fmt.Sprintf("after-%d", u), SessionID: st.SessionID, PrizeID: st.PrizeID, AdmittedAt: time.Now().UTC()}
			if v, err := e.gate.Reserve(e.ctx, g); err != nil || v.Code != stock.Admitted {
				t.Fatalf("reserve %s: %+v %v", g.RequestID, v, err)
			}
			after = append(after, g)
		}
	}
	if onNew == 0 {
		t.Fatalf("none of %d prizes hashes to partitions 6 or 7: the test would not exercise them", len(stocks))
	}
	t.Logf("%d of %d prizes of the next sale would have moved partition (6 -> 8); %d are on the new partitions", moved, len(stocks), onNew)
	e.publish(e.topics.Grab.Name, after...)
	admitted = append(admitted, after...)
	// The consumer was left running: it finds the new partitions by itself.
	e.waitOrders(int64(len(admitted)))
	deadline := time.Now().Add(60 * time.Second)
	for {
		lag, err := admin.Lag(e.ctx, e.env["SECKILL_CONSUMER_GROUP"], event.Topic{Name: e.topics.Grab.Name, Partitions: 8})
		var total int64
		for _, n := range lag {
			total += n
		}
		if err == nil && len(lag) == 8 && total == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer lag after the change: %v %v", lag, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Nothing lost, nothing twice: one order per admitted grab, one creation event each on
	// the order topic, and every grab event of the topic has its order.
	if n, d := e.orders("1=1"), e.distinct(); n != int64(len(admitted)) || d != n {
		t.Fatalf("%d orders (%d request ids) for %d admitted grabs", n, d, len(admitted))
	}
	var unpublished int64
	for time.Now().Before(deadline) {
		if unpublished = e.orders("NOT " + store.PublishedSQL("orders")); unpublished == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen, events := e.orderEvents()
	for _, g := range admitted {
		o, err := store.NewOrders(e.db).ByRequestID(e.ctx, g.RequestID)
		if err != nil {
			t.Fatalf("admitted grab %s has no order: %v", g.RequestID, err)
		}
		if id := "order:" + g.RequestID + ":" + string(o.Status); seen[id] != 1 {
			t.Errorf("%s on the order topic %d times, want once", id, seen[id])
		}
	}
	if events != len(admitted) {
		t.Errorf("%d order events for %d orders", events, len(admitted))
	}
	grabEvents, err := harness.ReadTopic(e.ctx, e.brokers, event.Topic{Name: e.topics.Grab.Name, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(grabEvents) != len(admitted) {
		t.Errorf("%d grab events on the topic for %d admitted grabs", len(grabEvents), len(admitted))
	}
	for _, m := range grabEvents {
		g, err := event.DecodeGrab(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if want := event.PartitionOf(m.Key, 6); g.SessionID == e.session && m.Partition != want {
			t.Errorf("grab of the first sale on partition %d, want %d (it was published before the change)", m.Partition, want)
		}
		if want := event.PartitionOf(m.Key, 8); g.SessionID != e.session && m.Partition != want {
			t.Errorf("grab of the next sale on partition %d, want %d = murmur2 %% 8", m.Partition, want)
		}
	}
}

func (e *recEnv) distinct() int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Raw("SELECT COUNT(DISTINCT request_id) FROM orders").Row().Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// orderEvents reads the whole order topic and counts its messages by event id (the event-id
// header); it also returns how many messages it read.
func (e *recEnv) orderEvents() (map[string]int, int) {
	e.t.Helper()
	msgs, err := harness.ReadTopic(e.ctx, e.brokers, e.topics.Order)
	if err != nil {
		e.t.Fatal(err)
	}
	ids := map[string]int{}
	for _, m := range msgs {
		for _, h := range m.Headers {
			if h.Key == "event-id" {
				ids[string(h.Value)]++
			}
		}
	}
	return ids, len(msgs)
}

// `reconciler archive` refuses a cutoff younger than the reconciler's own window, keeps a
// session with open exception cases, lists without moving on --dry-run, then moves an ended,
// reported session's orders; their status still answers.
func TestArchiveCommand(t *testing.T) {
	e := newRecEnv(t, 10, 1)
	orders := store.NewOrders(e.db)
	var grabs []seckill.Grab
	for i := 0; i < 12; i++ {
		grabs = append(grabs, seckill.Grab{RequestID: seckill.RequestID(e.session, e.prize, fmt.Sprintf("key-arch-%04d", i)),
			UserID: fmt.Sprintf("u%d", i), SessionID: e.session, PrizeID: e.prize, AdmittedAt: time.Now().UTC()})
	}
	if res, err := orders.Persist(e.ctx, e.session, e.prize, grabs, time.Now()); err != nil || res.Succeeded != 10 || res.Rejected != 2 {
		t.Fatalf("persist: %+v %v", res, err)
	}
	for _, q := range []string{
		"UPDATE sessions SET starts_at = NOW(3) - INTERVAL 50 HOUR, ends_at = NOW(3) - INTERVAL 49 HOUR WHERE id = ?",
		"UPDATE orders SET event_published_at = NOW(6) WHERE session_id = ?",
	} {
		if err := e.db.Exec(q, e.session).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.Exec(`INSERT INTO session_reports (session_id, prize_id, total, sold, left_stock, rejected, drift_corrected, reported_at)
		VALUES (?, ?, 10, 10, 0, 2, 0, NOW(6))`, e.session, e.prize).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := e.tool(nil, "archive", "--ended-before", "2h"); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Fatalf("archive --ended-before 2h: %v, want refused (younger than a day and three key graces)", err)
	}
	// The two rejected grabs Redis had admitted are open cases: a person settles them first.
	got, err := e.tool(nil, "archive", "--ended-before", "48h")
	if err != nil || got["moved"] != float64(0) || !strings.Contains(fmt.Sprint(got["stocks"]), "skipped:open_cases") {
		t.Fatalf("archive with open cases: %v %v", err, got)
	}
	if err := e.db.Exec("UPDATE exception_cases SET state = 'resolved' WHERE session_id = ?", e.session).Error; err != nil {
		t.Fatal(err)
	}
	got, err = e.tool(nil, "archive", "--ended-before", "48h", "--dry-run")
	if err != nil || got["moved"] != float64(0) || e.orders("1=1") != 12 || strings.Contains(fmt.Sprint(got["stocks"]), "skipped") {
		t.Fatalf("dry run: %v %v, %d orders left", err, got, e.orders("1=1"))
	}
	got, err = e.tool(nil, "archive", "--ended-before", "48h")
	if err != nil || got["moved"] != float64(12) || e.orders("1=1") != 0 {
		t.Fatalf("archive: %v %v, %d orders left", err, got, e.orders("1=1"))
	}
	if o, err := orders.ByRequestID(e.ctx, grabs[11].RequestID); err != nil || o.Status != seckill.OrderRejected {
		t.Fatalf("status of an archived order: %+v %v", o, err)
	}
}

// The drained check counts the reservations of every stock bucket: a grab admitted in bucket
// 2 of a bucketed prize is in bucket 2's keys only (before, only bucket 0's were read, and a
// prize whose pending grabs were all in other buckets looked drained).
func TestPendingReservationsInEveryBucket(t *testing.T) {
	op := stacktest.NewBucketedPrize(t, 3, 4, 1)
	ctx := stacktest.Context(t, 30*time.Second)
	grab := seckill.Grab{RequestID: "pending-in-bucket-2", UserID: "u", SessionID: op.SessionID, PrizeID: op.PrizeID, Bucket: 2, Buckets: 4,
		AdmittedAt: time.Now()}
	if v, err := op.Gate.Reserve(ctx, grab); err != nil || v.Code != stock.Admitted {
		t.Fatalf("reserve in bucket 2: %+v %v", v, err)
	}
	stocks, err := store.NewCatalog(op.DB, time.Now).Stocks(ctx, op.SessionID)
	if err != nil || len(stocks) != 1 || stocks[0].Buckets != 4 {
		t.Fatalf("stocks %+v %v", stocks, err)
	}
	if n, err := pendingReservations(ctx, op.Gate, stocks); err != nil || n != 1 {
		t.Fatalf("pending reservations: %d %v, want the one in bucket 2", n, err)
	}
}
