package store_test

import (
	"testing"
	"time"

	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The rebuild guard: a gateway's report counts only if its counts were sampled after the
// reconciler's since. A report whose sample predates since, even if it commits after it, must
// leave the prize not quiet (it may miss a grab held between the sample and since); a report
// stamped AdmissionInDoubt after since and holding nothing makes it quiet.
func TestQuietIgnoresAReportSampledBeforeSince(t *testing.T) {
	_, db := stacktest.Migrated(t)
	ctx := stacktest.Context(t, 30*time.Second)
	un := store.NewUnpublished(db)
	const session, prize = 7, 9

	var since time.Time
	err := un.Report(ctx, "gw-slow", func() []store.PrizeCount {
		counts := []store.PrizeCount{} // nothing held at the sample
		// The reconciler reads its clock after the sample, before the report commits.
		var err error
		if since, err = un.Now(ctx); err != nil {
			t.Error(err)
		}
		return counts
	})
	if err != nil {
		t.Fatal(err)
	}
	if quiet, h, err := un.Quiet(ctx, session, prize, since, time.Minute); err != nil || quiet || h.NotYet != 1 {
		t.Fatalf("a report sampled before since, committed after it: quiet %v %+v %v; want not quiet, 1 gateway not yet reported", quiet, h, err)
	}

	// Stamped (and so sampled) after since, but less than AdmissionInDoubt after it: an
	// admission call younger than that is not in the counts, and could have started before
	// since. Not quiet yet; stamped more than that after since, quiet.
	if err := un.Report(ctx, "gw-slow", func() []store.PrizeCount { return nil }); err != nil {
		t.Fatal(err)
	}
	beat := func() time.Time {
		t.Helper()
		var at time.Time
		if err := db.Raw("SELECT beat_at FROM gateway_heartbeats WHERE gateway = 'gw-slow'").Row().Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	at := beat()
	if quiet, h, err := un.Quiet(ctx, session, prize, at.Add(-store.AdmissionInDoubt/2), time.Minute); err != nil || quiet || h.NotYet != 1 {
		t.Fatalf("a report stamped less than AdmissionInDoubt after since: quiet %v %+v %v; want not quiet", quiet, h, err)
	}
	early := at.Add(-store.AdmissionInDoubt - time.Millisecond)
	if quiet, h, err := un.Quiet(ctx, session, prize, early, time.Minute); err != nil || !quiet {
		t.Fatalf("a report stamped more than AdmissionInDoubt after since, holding nothing: quiet %v %+v %v; want quiet", quiet, h, err)
	}
	held := func() []store.PrizeCount { return []store.PrizeCount{{SessionID: session, PrizeID: prize, Pending: 1}} }
	if err := un.Report(ctx, "gw-slow", held); err != nil {
		t.Fatal(err)
	}
	if quiet, h, err := un.Quiet(ctx, session, prize, beat().Add(-store.AdmissionInDoubt-time.Millisecond), time.Minute); err != nil || quiet || h.Holding != 1 {
		t.Fatalf("a report holding a grab: quiet %v %+v %v; want not quiet, 1 holding", quiet, h, err)
	}
}
