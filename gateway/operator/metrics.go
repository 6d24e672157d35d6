package operator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Register adds the reload's metrics to reg: seckill_gateway_admin_tokens_reload_ok (0 while
// the file on disk is refused, the alert's signal: it stays 0 until the file is fixed, where
// an increase of the counter over a window would fall quiet) and
// seckill_gateway_admin_tokens_reload_failures_total. Both look at the file first, so a scrape
// notices a change without waiting for an admin request.
func (c *Credentials) Register(reg prometheus.Registerer) {
	state := func() (failed bool, failures uint64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.refresh()
		return c.failed, c.failures
	}
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "seckill_gateway_admin_tokens_reload_ok",
		Help: "1 when the admin tokens file (SECKILL_ADMIN_TOKENS_FILE) in force is the one on disk; 0 when its last change was refused (the credentials read before stay in force)."},
		func() float64 {
			if failed, _ := state(); failed {
				return 0
			}
			return 1
		})
	f.NewCounterFunc(prometheus.CounterOpts{Name: "seckill_gateway_admin_tokens_reload_failures_total",
		Help: "Changes of the admin tokens file refused (unreadable, unparsable or without a credential), each counted once."},
		func() float64 { _, n := state(); return float64(n) })
}
