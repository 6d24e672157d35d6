package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/event"
)

// `reconciler --check` passes on a schema and topics that fit this build, fails on a
// migration not applied yet, notes versions a newer release applied, and refuses topics
// whose partition counts differ from the configuration.
func TestCheckBeforeAnUpgrade(t *testing.T) {
	stacktest.Redis(t)
	dsn, db := stacktest.Migrated(t)
	_, topics := stacktest.Kafka(t)
	ctx := stacktest.Context(t, 60*time.Second)
	prefix := strings.TrimSuffix(topics.Grab.Name, ".seckill.grab")
	vars := map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_TOPIC_PREFIX": prefix,
		"SECKILL_CONSUMER_GROUP": "t-" + stacktest.ID(t), "SECKILL_FEEDBACK_GROUP": "t-fb-" + stacktest.ID(t)}
	check := func(vars map[string]string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, []string{"--check"}, stacktest.Getenv(vars), &out, io.Discard)
		return out.String(), err
	}

	out, err := check(vars)
	if err != nil || !strings.Contains(out, "ok    mysql schema: all") || !strings.Contains(out, "ok    kafka: partition counts") ||
		!strings.Contains(out, "info  grab events not yet consumed") {
		t.Fatalf("check on a fitting stack: %v\n%s", err, out)
	}

	// A newer release migrated the database: a note, not a failure.
	if err := db.Exec("INSERT INTO schema_migrations (version, name, checksum, finished) VALUES (9999, 'from_the_future', '', 1)").Error; err != nil {
		t.Fatal(err)
	}
	if out, err := check(vars); err != nil || !strings.Contains(out, "note  mysql schema: versions [9999]") {
		t.Fatalf("check on a newer schema: %v\n%s", err, out)
	}
	// This build's last migration not applied: fails, naming it and what to run.
	var last int
	if err := db.Raw("SELECT MAX(version) FROM schema_migrations WHERE version < 9999").Row().Scan(&last); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("DELETE FROM schema_migrations WHERE version = ?", last).Error; err != nil {
		t.Fatal(err)
	}
	if out, err := check(vars); !errors.Is(err, errFoundProblems) || !strings.Contains(out, "FAIL  mysql schema: migrations not applied") ||
		!strings.Contains(out, "gateway migrate") {
		t.Fatalf("check with a pending migration: %v\n%s", err, out)
	}

	// Topics with another partition count than the configuration's.
	other := event.DefaultTopics("t" + stacktest.ID(t) + "x")
	other.Grab.Partitions = 2
	admin := stacktest.KafkaAdmin(t, stacktest.KafkaBrokers())
	if err := admin.EnsureTopics(ctx, other.All()...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var names []string
		for _, tp := range other.All() {
			names = append(names, tp.Name)
		}
		_ = admin.DeleteTopics(stacktest.Context(t, 10*time.Second), names...)
	})
	vars["SECKILL_TOPIC_PREFIX"] = strings.TrimSuffix(other.Grab.Name, ".seckill.grab")
	if out, err := check(vars); err == nil || !strings.Contains(err.Error(), "has 2 partitions on the broker, configured 6") {
		t.Fatalf("check on a grab topic of 2 partitions: %v\n%s", err, out)
	}
}
