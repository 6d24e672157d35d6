package writepath

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill-pipeline/seckill/pkg/exception"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The paths that make orders: the path label of the admission → order histogram.
const (
	PathGrab         = "grab"         // the consumers, from the grab topic
	PathCompensation = "compensation" // the reconciler's replay of the compensation topic
	PathWorkbench    = "workbench"    // an event a person replayed from the exceptions workbench, on either topic
)

// NewAdmissionToOrder returns the histogram of the time from a grab's admission in the
// gateway to the commit of its order, by path, registered on reg. The consumer and the
// reconciler each register one (so a sum over jobs covers every order). It keeps the consumer's name,
// which it had while only the consumers were timed, so dashboards and alerts of the
// histogram go on working; the reconciler's series carry path="compensation" or "workbench".
func NewAdmissionToOrder(reg prometheus.Registerer) *prometheus.HistogramVec {
	return promauto.With(reg).NewHistogramVec(prometheus.HistogramOpts{Name: "seckill_consumer_admission_to_order_seconds",
		Help: "Time from a grab's admission in the gateway to the commit of its order (new orders only, succeeded or rejected), by path: grab (the consumers), compensation (the reconciler's replay), workbench (an event a person replayed).",
		// 1 ms to about 2.3 hours: a compensation or workbench replay can come long after.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 24)}, []string{"path"})
}

// ObserveAdmission records the wait of each new order of a persisted group (orders that
// existed before are redeliveries, timed when they were made) under path, or under
// PathWorkbench for the events a person replayed (exception.HeaderReplayedBy).
func ObserveAdmission(h *prometheus.HistogramVec, b *Batch[seckill.Grab], res store.PersistResult, path string, committed time.Time) {
	var replayed map[string]bool
	for i, m := range b.Msgs {
		for _, hd := range m.Headers {
			if hd.Key == exception.HeaderReplayedBy && i < len(b.Items) {
				if replayed == nil {
					replayed = map[string]bool{}
				}
				replayed[b.Items[i].RequestID] = true
			}
		}
	}
	for _, o := range res.Outcomes {
		if o.Before {
			continue
		}
		p := path
		if replayed[o.Grab.RequestID] {
			p = PathWorkbench
		}
		// Clocks of two hosts: a gateway ahead of this one must not make a negative wait.
		h.WithLabelValues(p).Observe(max(0, committed.Sub(o.Grab.AdmittedAt).Seconds()))
	}
}
