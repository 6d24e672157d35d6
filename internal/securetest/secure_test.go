package securetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// profile is the secure profile's state folder, from its env file; the test is skipped
// without SECKILL_SECURE=1 and fails when it is set but a file the profile makes is missing.
func profile(t *testing.T) string {
	t.Helper()
	if os.Getenv("SECKILL_SECURE") != "1" {
		t.Skip("the secure profile's variables are not loaded (deploy/local/stack up --profile secure; source .state/secure/env)")
	}
	dir := os.Getenv("SECKILL_SECURE_DIR")
	for _, f := range []string{"certs/ca.pem", "certs/other-ca.pem", "secrets/redis-gateway", "secrets/kafka-gateway",
		"secrets/kafka-consumer", "secrets/mysql-app", "secrets/mysql-migrate"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("SECKILL_SECURE=1 but the secure profile's %s is missing: %v", f, err)
		}
	}
	return dir
}

// The topics' metadata (kafkainit's check of partitions and replication after creating
// them) goes through the admin's SASL and TLS transport, not kafka-go's plaintext default.
func TestAdminDescribesTopicsOnSecuredBrokers(t *testing.T) {
	profile(t)
	sec, err := config.LoadKafkaSecurity(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := event.NewAdmin(stacktest.KafkaBrokers(), event.AdminSecurity(sec))
	if err != nil {
		t.Fatal(err)
	}
	states, err := admin.Describe(stacktest.Context(t, 30*time.Second), event.DefaultTopics("").All()...)
	if err != nil {
		t.Fatalf("describe the pipeline's topics as %s: %v", sec.Principal(), err)
	}
	for _, s := range states {
		if len(s.Partitions) == 0 || !strings.HasPrefix(s.Name, "seckill.") {
			t.Errorf("topic %+v: want its partitions", s)
		}
	}
}
