package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/seckill-pipeline/seckill/gateway/clientip"
)

// A route mounted outside the table, or a row nothing mounts, stops the gateway at start.
func TestAdminRouteTableIsComplete(t *testing.T) {
	a := newAdmin(nil, nil, nil, tokenNames{}, clientip.Peer, func() {}, nil)
	mux := http.NewServeMux()
	for _, rt := range Routes() {
		a.handle(mux, rt.Pattern, func(http.ResponseWriter, *http.Request) {})
	}
	if err := a.complete(); err != nil {
		t.Fatalf("every row mounted: %v", err)
	}
	a.handle(mux, "DELETE /admin/v1/activities/{id}", func(http.ResponseWriter, *http.Request) {})
	if err := a.complete(); err == nil || !strings.Contains(err.Error(), `"DELETE /admin/v1/activities/{id}" is not in the route table`) {
		t.Fatalf("a route outside the table: %v", err)
	}
	b := newAdmin(nil, nil, nil, tokenNames{}, clientip.Peer, func() {}, nil)
	if err := b.complete(); err == nil || !strings.Contains(err.Error(), `"GET /metrics" has no handler`) {
		t.Fatalf("nothing mounted: %v", err)
	}
}
