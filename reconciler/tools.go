package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The operator commands (docs/operators.md, Procedures): each runs once, between sales,
// prints what it found and did, and exits non-zero (errFoundProblems) when it refused.
var tools = map[string]func(ctx context.Context, t *toolEnv, args []string) error{
	"drained": drainedTool,
	"archive": archiveTool,
}

const toolsUsage = `usage: reconciler drained [--json]
       reconciler archive --ended-before DURATION [--batch N] [--dry-run] [--json]`

// toolEnv is what the commands share: the reconciler's configuration and clients.
type toolEnv struct {
	cfg     config.Reconciler
	catalog *store.Catalog
	gate    *stock.Gate
	admin   *event.Admin
	stdout  io.Writer
	now     func() time.Time

	outbox   *store.Outbox
	gateways *store.Unpublished
	archive  *store.Archive
	comp     *compensationJob
}

// runTool runs the operator command name.
func runTool(ctx context.Context, name string, args []string, getenv func(string) string, stdout io.Writer) error {
	tool, ok := tools[name]
	if !ok {
		return fmt.Errorf("unknown command %q\n%s", name, toolsUsage)
	}
	cfg, err := config.LoadReconciler(getenv)
	if err != nil {
		return err
	}
	srv, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.close()
	db, gate, admin := srv.db, srv.gate, srv.admin
	catalog := store.NewCatalog(db, time.Now)
	t := &toolEnv{cfg: cfg, catalog: catalog, gate: gate, admin: admin, stdout: stdout, now: time.Now,
		outbox: store.NewOutbox(db), gateways: store.NewUnpublished(db), archive: store.NewArchive(db),
		comp: &compensationJob{bounds: admin, offsets: catalog, topic: cfg.Topics.Compensation,
			metrics: newCompensationMetrics(prometheus.NewRegistry())}}
	return tool(ctx, t, args)
}

func toolFlags(name string) (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("reconciler "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs, fs.Bool("json", false, "print the result as JSON")
}

func parseTool(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, toolsUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), toolsUsage)
	}
	return nil
}

// gateCheck is one condition of a procedure, as printed.
type gateCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func printChecks(w io.Writer, asJSON bool, checks []gateCheck, extra map[string]any) error {
	if asJSON {
		out := map[string]any{"checks": checks}
		for k, v := range extra {
			out[k] = v
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range checks {
		res := "ok"
		if !c.OK {
			res = "NOT YET"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, c.Detail)
	}
	return tw.Flush()
}

func allOK(checks []gateCheck) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// drainChecks says whether the pipeline holds no grab anywhere but MySQL: what must be true
// before a change that moves keys to other partitions (adding grab partitions, changing the
// partitioner). Each check is read after the one before, in the direction grabs flow
// (gateways, Redis, the grab topic, the compensation topic, the outbox), so a grab that moved
// on between two reads is seen by the later one.
func (t *toolEnv) drainChecks(ctx context.Context) ([]gateCheck, error) {
	now := t.now()
	var out []gateCheck

	// The reconciler's own start-up check: a count on the broker other than the setting
	// means an earlier change was not finished (SECKILL_GRAB_PARTITIONS not updated).
	perr := t.admin.CheckPartitions(ctx, t.cfg.Topics.Grab)
	detail := fmt.Sprintf("%s has SECKILL_GRAB_PARTITIONS=%d partitions", t.cfg.Topics.Grab.Name, t.cfg.Topics.Grab.Partitions)
	if perr != nil {
		detail = perr.Error()
	}
	out = append(out, gateCheck{"partitions_match_setting", perr == nil, detail})

	// No session open or starting before the procedure is over: admissions stop only when
	// nothing is on sale (a gateway that is up admits any open session's grabs).
	sessions, err := t.catalog.SessionsOverlapping(ctx, now, now.Add(t.cfg.PreheatLead))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range sessions {
		ids = append(ids, fmt.Sprint(s.ID))
	}
	out = append(out, gateCheck{"no_session_open", len(sessions) == 0,
		fmt.Sprintf("%d sessions open or starting within SECKILL_PREHEAT_LEAD (%s) %s", len(sessions), t.cfg.PreheatLead, strings.Join(ids, " "))})

	live, unpublished, err := t.gateways.Live(ctx, t.cfg.GatewayDeadAfter)
	if err != nil {
		return nil, err
	}
	out = append(out, gateCheck{"gateways_stopped", live == 0,
		fmt.Sprintf("%d gateways beat within SECKILL_GATEWAY_DEAD_AFTER (%s); %d grabs last reported unpublished", live, t.cfg.GatewayDeadAfter, unpublished)})

	// Reservations of every session the stale job still looks after (up to a day and three
	// key graces after its end): each is a grab Kafka may not have.
	recent, err := t.catalog.SessionsOverlapping(ctx, now.Add(-24*time.Hour-3*t.cfg.KeyGrace), now)
	if err != nil {
		return nil, err
	}
	var pending int64
	if len(recent) > 0 {
		sids := make([]int64, len(recent))
		for i, s := range recent {
			sids[i] = s.ID
		}
		stocks, err := t.catalog.Stocks(ctx, sids...)
		if err != nil {
			return nil, err
		}
		if pending, err = pendingReservations(ctx, t.gate, stocks); err != nil {
			return nil, err
		}
	}
	out = append(out, gateCheck{"no_pending_reservations", pending == 0,
		fmt.Sprintf("%d reservations in Redis without an order (the reconciler settles or re-publishes them)", pending)})

	lag, err := t.admin.Lag(ctx, t.cfg.ConsumerGroup, t.cfg.Topics.Grab)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, n := range lag {
		total += n
	}
	out = append(out, gateCheck{"consumer_lag_zero", total == 0,
		fmt.Sprintf("group %s: %d grab events unread on %d partitions of %s", t.cfg.ConsumerGroup, total, len(lag), t.cfg.Topics.Grab.Name)})

	backlog, err := t.comp.Backlog(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, gateCheck{"compensation_empty", backlog == 0, fmt.Sprintf("%d compensation events not replayed", backlog)})

	outbox, err := t.outbox.CountPending(ctx)
	if err != nil {
		return nil, err
	}
	out = append(out, gateCheck{"outbox_empty", outbox == 0, fmt.Sprintf("%d order events not on %s yet", outbox, t.cfg.Topics.Order.Name)})
	return out, nil
}

// drainedTool prints the drain checks; non-zero exit unless all pass. It is the gate of
// every change that moves keys between partitions (docs/operators.md, Adding grab
// partitions): the partitions themselves are added with Kafka's kafka-topics --alter.
func drainedTool(ctx context.Context, t *toolEnv, args []string) error {
	fs, asJSON := toolFlags("drained")
	if err := parseTool(fs, args); err != nil {
		return err
	}
	checks, err := t.drainChecks(ctx)
	if err != nil {
		return err
	}
	if err := printChecks(t.stdout, *asJSON, checks, map[string]any{"drained": allOK(checks)}); err != nil {
		return err
	}
	if !allOK(checks) {
		return errFoundProblems
	}
	return nil
}

// archiveRow is one session×prize in the archive command's report.
type archiveRow struct {
	SessionID int64  `json:"session_id"`
	PrizeID   int64  `json:"prize_id"`
	EndedAt   string `json:"ended_at"`
	Orders    int64  `json:"orders"`
	Moved     int64  `json:"moved"`
	Skipped   string `json:"skipped,omitempty"`
}

// archiveTool moves the orders of sessions that ended more than --ended-before ago into
// orders_archive, one transaction per batch; session×prizes a job still has work on are
// listed with the reason and left for a later run.
func archiveTool(ctx context.Context, t *toolEnv, args []string) error {
	fs, asJSON := toolFlags("archive")
	before := fs.Duration("ended-before", 0, "archive sessions that ended at least this long ago (e.g. 720h)")
	batch := fs.Int("batch", 1000, "orders moved per transaction")
	dryRun := fs.Bool("dry-run", false, "list what would be archived, move nothing")
	if err := parseTool(fs, args); err != nil {
		return err
	}
	// The stale job looks after a session's reservations for up to a day and three key
	// graces after its end, and reads orders by request id meanwhile; archiving earlier
	// would be safe (it reads the archive too) but leaves those jobs' work half visible.
	if floor := 24*time.Hour + 3*t.cfg.KeyGrace; *before < floor {
		return fmt.Errorf("--ended-before %s: at least %s (a day and three SECKILL_KEY_GRACE after a session's end, while the reconciler still settles its reservations)", *before, floor)
	}
	if *batch < 1 || *batch > 50000 {
		return fmt.Errorf("--batch %d: want 1 to 50000", *batch)
	}
	cutoff := t.now().Add(-*before)
	cands, err := t.archive.Candidates(ctx, cutoff)
	if err != nil {
		return err
	}
	rows := make([]archiveRow, 0, len(cands))
	var moved int64
	for _, c := range cands {
		r := archiveRow{SessionID: c.SessionID, PrizeID: c.PrizeID, EndedAt: c.EndedAt.Format(time.RFC3339), Orders: c.Orders, Skipped: string(c.Skip)}
		if c.Skip == "" && !*dryRun {
			n, err := t.archive.Move(ctx, c.SessionID, c.PrizeID, *batch, t.now())
			r.Moved = n
			moved += n
			if err != nil {
				rows = append(rows, r)
				_ = printArchive(t.stdout, *asJSON, cutoff, rows, moved)
				return err
			}
		}
		rows = append(rows, r)
	}
	return printArchive(t.stdout, *asJSON, cutoff, rows, moved)
}

func printArchive(w io.Writer, asJSON bool, cutoff time.Time, rows []archiveRow, moved int64) error {
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"ended_before": cutoff.Format(time.RFC3339), "stocks": rows, "moved": moved})
	}
	fmt.Fprintf(w, "archive of sessions ended before %s: %d orders moved\n", cutoff.Format(time.RFC3339), moved)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tPRIZE\tENDED\tORDERS\tMOVED\tSKIPPED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%s\n", r.SessionID, r.PrizeID, r.EndedAt, r.Orders, r.Moved, r.Skipped)
	}
	return tw.Flush()
}

// pendingReservations counts the reservations Redis holds without an order for stocks, in
// every stock bucket of a prize with buckets (a grab admitted in bucket 2 is in bucket 2's
// keys only).
func pendingReservations(ctx context.Context, g snapshotter, stocks []seckill.Stock) (int64, error) {
	snaps, err := g.PrizeSnapshots(ctx, stocks)
	if err != nil {
		return 0, err
	}
	var pending int64
	for _, s := range snaps {
		pending += s.Pending
	}
	return pending, nil
}
