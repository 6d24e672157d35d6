package writepath

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// New orders are timed under the caller's path, or under workbench when a person replayed
// the event; orders that existed before (redeliveries) are not timed again.
func TestObserveAdmissionByPath(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g := func(rid string) seckill.Grab { return seckill.Grab{RequestID: rid, AdmittedAt: t0} }
	b := &Batch[seckill.Grab]{Items: []seckill.Grab{g("a"), g("b"), g("c")}, Msgs: []kafka.Message{
		{}, {Headers: []kafka.Header{{Key: exception.HeaderReplayedBy, Value: []byte("case:7")}}}, {}}}
	res := store.PersistResult{Outcomes: []store.Outcome{
		{Grab: g("a"), Status: seckill.OrderSucceeded},
		{Grab: g("b"), Status: seckill.OrderSucceeded},
		{Grab: g("c"), Status: seckill.OrderSucceeded, Before: true},
	}}
	h := NewAdmissionToOrder(prometheus.NewRegistry())
	ObserveAdmission(h, b, res, PathCompensation, t0.Add(3*time.Second))
	if n := testutil.CollectAndCount(h); n != 2 {
		t.Fatalf("%d series, want 2 (compensation, workbench)", n)
	}
	for _, path := range []string{PathCompensation, PathWorkbench} {
		var m dto.Metric
		if err := h.WithLabelValues(path).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		if n, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); n != 1 || sum != 3 {
			t.Errorf("%s: %d orders waiting %v s in all, want 1 order of 3 s", path, n, sum)
		}
	}
}
