package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/internal/linearcheck"
	"github.com/seckill-pipeline/seckill/pkg/stock"
)

// historyHeader is the row's history header: its seed and the sale's rules the checker needs.
func (c *Pipeline) historyHeader(sc Scenario, seed uint64) history.Header {
	h := history.Header{Row: sc.Name, Seed: seed, Start: c.History.Start(), Limit: c.opts.Limit,
		RegrabAfterCancel: c.opts.RegrabAfterCancel, RedisMayForget: sc.RedisMayForget}
	for i, p := range c.Prizes {
		if p.IsDraw() {
			continue // no client operation touches its stock: checkDraw checks the draw
		}
		hp := history.Prize{ID: p.ID, Total: p.StockPerSession}
		if c.buckets(i) > 1 {
			hp.Stale = c.othersCache()
		}
		h.Prizes = append(h.Prizes, hp)
	}
	return h
}

// serverReturns reads back from MySQL every unit the pipeline put back into a prize's Redis
// stock during the row (returns for resale, stamped after their Redis step) and every drift
// correction (stamped after it), as operations of the history.
func (c *Pipeline) serverReturns(ctx context.Context) ([]history.Op, error) {
	var returns []struct {
		PrizeID     int64
		RedisDoneAt time.Time
	}
	if err := c.DB.WithContext(ctx).Raw(`SELECT prize_id, redis_done_at FROM stock_returns WHERE session_id = ?
		AND resale AND redis_done_at IS NOT NULL`, c.Session.ID).Scan(&returns).Error; err != nil {
		return nil, fmt.Errorf("history: returns: %w", err)
	}
	var corrections []struct {
		PrizeID int64
		At      time.Time
		Units   int
	}
	if err := c.DB.WithContext(ctx).Raw(`SELECT prize_id, at, after_value - before_value AS units FROM audit_log
		WHERE session_id = ? AND action = 'correct_redis_stock' AND after_value <> before_value`, c.Session.ID).Scan(&corrections).Error; err != nil {
		return nil, fmt.Errorf("history: corrections: %w", err)
	}
	var out []history.Op
	for _, r := range returns {
		t := c.History.At(r.RedisDoneAt)
		out = append(out, history.Op{Client: -1, Kind: history.Returned, Prize: r.PrizeID, Call: t, Return: t, Units: 1, Out: "return"})
	}
	for _, r := range corrections {
		t := c.History.At(r.At)
		out = append(out, history.Op{Client: -1, Kind: history.Returned, Prize: r.PrizeID, Call: t, Return: t, Units: r.Units, Out: "correction"})
	}
	return out, nil
}

// AdjustRedisLeft changes prize i's stock in Redis by units (drift made on purpose), and
// records it in the row's history.
func (c *Pipeline) AdjustRedisLeft(ctx context.Context, i, units int) error {
	call := c.History.Now()
	err := c.Redis.HIncrBy(ctx, stock.KeysFor(c.Session.ID, c.Prizes[i].ID).Meta, "left", int64(units)).Err()
	op := history.Op{Client: -1, Kind: history.Stock, Prize: c.Prizes[i].ID, Call: call, Return: c.History.Now(), Units: units, Out: "redis left"}
	if err != nil {
		op.Err = err.Error()
	}
	c.History.Add(op)
	return err
}

// checkHistory writes the row's history (and, on a violation, Porcupine's visualization of
// the first buyer it refused) under dir, checks it, and adds the verdict to res.
func (c *Pipeline) checkHistory(ctx context.Context, sc Scenario, seed uint64, dir string, res *Result, log io.Writer) error {
	server, err := c.serverReturns(ctx)
	if err != nil {
		return err
	}
	for _, op := range server {
		c.History.Add(op)
	}
	h, ops := c.historyHeader(sc, seed), c.History.Ops()
	var base string
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		base = filepath.Join(dir, slug(sc.Name))
		if err := history.WriteFile(base+".history.jsonl.gz", h, ops); err != nil {
			return err
		}
	}
	rep := linearcheck.Check(h, ops)
	res.HistoryOps, res.CheckTime = rep.Ops, rep.Elapsed
	res.Linearizable = "yes"
	fmt.Fprintf(log, "  history: %d operations, %d buyer partitions, checked in %s\n", rep.Ops, rep.Partitions, rep.Elapsed.Round(time.Millisecond))
	if rep.Linearizable() {
		return nil
	}
	res.Linearizable = "no"
	res.Violations = map[linearcheck.Class]int{}
	for _, v := range rep.Violations {
		res.Violations[v.Class]++
	}
	for i, v := range rep.Violations {
		if i == 5 {
			res.problem("history: %d more violations", len(rep.Violations)-i)
			break
		}
		lines := make([]string, 0, 8)
		for j, op := range v.Ops {
			if j == 8 {
				lines = append(lines, fmt.Sprintf("… %d more", len(v.Ops)-j))
				break
			}
			lines = append(lines, "    "+linearcheck.Describe(op))
		}
		res.problem("history: %s\n%s", v, strings.Join(lines, "\n"))
	}
	if base != "" {
		if ok, err := rep.WriteHTML(base + ".violation.html"); err != nil {
			return err
		} else if ok {
			res.problem("history: Porcupine's visualization of the first refused buyer: %s", base+".violation.html")
		}
		res.problem("history: replay the check with go run ./cmd/chaos -check %s", base+".history.jsonl.gz")
	}
	return nil
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// slug names a row's files: its name in lower case, words joined by dashes.
func slug(name string) string {
	return strings.Trim(nonWord.ReplaceAllString(strings.ToLower(name), "-"), "-")
}
