package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"gorm.io/gorm"

	"github.com/seckill-pipeline/seckill/pkg/buildinfo"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// check is `reconciler --check`: what a build must find before it is rolled out, printed one
// line each. By the time it runs, start-up has already refused a Redis that may evict, a
// Kafka principal without this reconciler's ACLs and topics whose partition counts differ
// from the configuration (keys would map to other partitions), each with an error naming it.
// Here the schema is compared with this build's migrations (anything pending, interrupted or
// edited fails the check), and what is in flight is printed for the changes that cannot be
// rolled, which need it drained (docs/operators.md, "Changes that cannot be rolled").
func check(ctx context.Context, w io.Writer, db *gorm.DB, lag lagReader, group string, topics event.Topics) error {
	info := buildinfo.Read()
	fmt.Fprintf(w, "build %s (%s)\n", info.Version, info.Revision)
	fmt.Fprintln(w, "ok    redis: reachable, maxmemory-policy noeviction")
	fmt.Fprintln(w, "ok    kafka: this reconciler's ACLs")
	fmt.Fprintf(w, "ok    kafka: partition counts as configured: %s %d, %s %d, %s %d\n",
		topics.Grab.Name, topics.Grab.Partitions, topics.Compensation.Name, topics.Compensation.Partitions,
		topics.Feedback.Name, topics.Feedback.Partitions)
	st, err := store.CheckSchema(ctx, db)
	if err != nil {
		return err
	}
	problems := st.Problems()
	for _, p := range problems {
		fmt.Fprintf(w, "FAIL  mysql schema: %s\n", p)
	}
	if len(problems) == 0 {
		fmt.Fprintf(w, "ok    mysql schema: all %d migrations of this build applied\n", st.Applied)
	}
	if len(st.Newer) > 0 {
		fmt.Fprintf(w, "note  mysql schema: versions %v were applied by a newer release\n", st.Newer)
	}
	// In flight: informational, since during a sale it is never zero.
	per, err := lag.Lag(ctx, group, topics.Grab)
	if err != nil {
		return fmt.Errorf("consumer lag: %w", err)
	}
	var total int64
	var parts []string
	for p := 0; p < topics.Grab.Partitions; p++ {
		total += per[p]
		parts = append(parts, fmt.Sprint(per[p]))
	}
	fmt.Fprintf(w, "info  grab events not yet consumed by %s: %d (per partition %s)\n", group, total, strings.Join(parts, " "))
	if len(problems) > 0 {
		return errFoundProblems
	}
	return nil
}
