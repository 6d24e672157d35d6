package store_test

import (
	"testing"

	"github.com/seckill-pipeline/seckill/pkg/store"
)

func TestRelayLockNameIsPerOutbox(t *testing.T) {
	single := store.RelayLockName("seckill:seckill@tcp(127.0.0.1:13306)/seckill?parseTime=true", "seckill.order")
	cluster := store.RelayLockName("seckill:seckill@tcp(127.0.0.1:13306)/seckill_cluster?parseTime=true", "seckill.order")
	if single != "seckill.order-relay.seckill.seckill.order" {
		t.Errorf("single-node stack's lock = %q", single)
	}
	if cluster == single {
		t.Errorf("two databases on one server share the relay lock %q", single)
	}
	if store.RelayLockName("u:p@tcp(h:1)/seckill", "a.seckill.order") == store.RelayLockName("u:p@tcp(h:1)/seckill", "b.seckill.order") {
		t.Error("two order topics share the relay lock")
	}
	long := store.RelayLockName("u:p@tcp(h:1)/seckill_t_0123456789ab", "t0123456789ab.seckill.order")
	if len(long) > 64 {
		t.Errorf("lock name %q is %d characters; MySQL refuses more than 64", long, len(long))
	}
	if long == store.RelayLockName("u:p@tcp(h:1)/seckill_t_0123456789ac", "t0123456789ab.seckill.order") {
		t.Error("hashed names collide for two databases")
	}
}
