package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-pipeline/seckill/internal/history"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// Click is one grab a crowd member makes: who, which prize, with which Idempotency-Key.
// Repeat clicks reuse an earlier click's key (a double click or a client retry).
type Click struct {
	User  int
	Prize int // index into the pipeline's prizes
	Key   string
}

// Plan draws a seeded crowd: requests clicks by users users over the prizes, of which
// repeatFrac repeat an earlier click with the same key.
func Plan(seed uint64, requests, users, prizes int, repeatFrac float64) []Click {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Click, 0, requests)
	for i := 0; i < requests; i++ {
		if i > 0 && rng.Float64() < repeatFrac {
			out = append(out, out[rng.IntN(len(out))])
			continue
		}
		out = append(out, Click{User: rng.IntN(users), Prize: rng.IntN(prizes), Key: fmt.Sprintf("k%d-%08d", seed%100000, i)})
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Answer is the last HTTP answer a click got after its client retries.
type Answer struct {
	Click
	Code      int    // 0: never answered (network errors until the retry budget ran out)
	RequestID string // from a 202
	Status    string // queued / succeeded / rejected (202) or the error code (4xx/5xx)
	Attempts  int
	Latency   time.Duration // from the first attempt to the last answer, retries included
	// Sent and At bound the last attempt: sent no earlier than Sent, answered no later than
	// At (the sold_out column of a prize with buckets places each answer between them).
	Sent, At time.Time
}

// Crowd fires clicks at a gateway.
type Crowd struct {
	Target string
	// Targets, when set, replace Target: click i goes to Targets[i % n] first and, after a
	// network error (a refused connection: that gateway is restarting), to the next one, as
	// a load balancer that retries elsewhere would send it.
	Targets     []string
	Concurrency int
	RetryBudget time.Duration // how long one click keeps retrying 503/429/network errors
	Tokens      func(user int) string
	Prizes      []int64
	Session     int64
	// Rate, when > 0, paces the crowd: click i is sent no earlier than i/Rate seconds after
	// the start, so a sale lasts long enough for returned units to be sold again.
	Rate float64
	// RetryNotOpen makes a click answered not_open try again (within RetryBudget), as a
	// buyer waiting for the open keeps pressing: the crowd of a sale that opens under it.
	RetryNotOpen bool
	// Log, when set, records every attempt's answer (the scenarios that measure how long
	// clients saw errors).
	Log *AttemptLog
	// History, when set, records every attempt as an operation of the row's history, and
	// each admission is read back once at once (a 202 must be readable right away).
	History *history.Recorder
}

// AttemptLog is every answer a crowd got, attempt by attempt, with its time.
type AttemptLog struct {
	mu    sync.Mutex
	at    []time.Time
	codes []int // 0: no answer (a network error)
}

func (l *AttemptLog) add(code int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, time.Now())
	l.codes = append(l.codes, code)
}

// Count returns how many attempts were answered code (0: not answered).
func (l *AttemptLog) Count(code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.codes {
		if c == code {
			n++
		}
	}
	return n
}

// LongestErrorRun returns the longest stretch, from its first answer to its last, in which
// every answer the crowd got was a 5xx or none, and how many answers it held; (0, 0) when
// no answer was an error.
func (l *AttemptLog) LongestErrorRun() (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := make([]int, len(l.at))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return l.at[idx[a]].Before(l.at[idx[b]]) })
	var longest time.Duration
	most, n := 0, 0
	var first time.Time
	for _, i := range idx {
		if c := l.codes[i]; c != 0 && c < 500 {
			n = 0
			continue
		}
		if n == 0 {
			first = l.at[i]
		}
		n++
		if d := l.at[i].Sub(first); d > longest || (d == longest && n > most) {
			longest, most = d, n
		}
	}
	return longest, most
}

var crowdClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}

// Fire sends every click and returns the answers in click order. onProgress is called with
// the number of clicks finished so far (for fault triggers).
func (c *Crowd) Fire(ctx context.Context, clicks []Click, onProgress func(done int)) []Answer {
	answers := make([]Answer, len(clicks))
	var next, done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(clicks) {
					return
				}
				if c.Rate > 0 {
					if wait := time.Until(start.Add(time.Duration(float64(i) / c.Rate * float64(time.Second)))); wait > 0 {
						time.Sleep(wait)
					}
				}
				answers[i] = c.click(ctx, w, i, clicks[i])
				if onProgress != nil {
					onProgress(int(done.Add(1)))
				}
			}
		}()
	}
	wg.Wait()
	return answers
}

func (c *Crowd) click(ctx context.Context, client, i int, k Click) (a Answer) {
	a = Answer{Click: k}
	started := time.Now()
	defer func() { a.Latency = time.Since(started) }()
	targets := c.Targets
	if len(targets) == 0 {
		targets = []string{c.Target}
	}
	path := fmt.Sprintf("/api/v1/sessions/%d/prizes/%d/grab", c.Session, c.Prizes[k.Prize])
	user := userName(k.User)
	rid := seckill.UserRequestID(c.Session, c.Prizes[k.Prize], user, k.Key)
	deadline := time.Now().Add(c.RetryBudget)
	backoff := 50 * time.Millisecond
	for {
		a.Attempts++
		a.Sent = time.Now()
		call := c.History.Now()
		code, body, retryAfter, err := c.post(ctx, targets[i%len(targets)]+path, c.Tokens(k.User), k.Key)
		a.At = time.Now()
		c.History.Add(grabOp(client, user, c.Prizes[k.Prize], k.Key, rid, call, c.History.Now(), code, body, err))
		if c.Log != nil {
			c.Log.add(code) // 0 with err
		}
		if err != nil {
			i++ // that gateway did not answer: the next attempt goes to another
		}
		if err == nil {
			a.Code = code
			switch code {
			case http.StatusAccepted:
				a.RequestID, _ = body["request_id"].(string)
				a.Status, _ = body["status"].(string)
				if c.History != nil && a.RequestID != "" {
					// Read your own admission: a 202 whose status is not there yet is a
					// violation the history shows, not something to wait out here.
					_, _, _ = PollAs(ctx, Reader{History: c.History, Client: client, User: user, Prize: c.Prizes[k.Prize], Tries: 1},
						targets[i%len(targets)], c.Tokens(k.User), a.RequestID)
				}
				return a
			case http.StatusServiceUnavailable, http.StatusTooManyRequests:
				a.Status, _ = body["error"].(string)
			case http.StatusConflict:
				if a.Status, _ = body["error"].(string); !c.RetryNotOpen || a.Status != "not_open" {
					return a
				}
			default:
				a.Status, _ = body["error"].(string)
				return a
			}
		}
		// Retry with the same Idempotency-Key: safe by construction.
		wait := backoff
		if retryAfter > 0 {
			wait = min(retryAfter, 2*time.Second)
		}
		if time.Now().Add(wait).After(deadline) || ctx.Err() != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(wait):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (c *Crowd) post(ctx context.Context, url, token, key string) (int, map[string]any, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := crowdClient.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body, retryAfter(resp.Header), nil
}

// grabOp is one grab attempt as an operation of the row's history: the answer's status (a
// 202's, with its reason) or error code, or the transport error.
func grabOp(client int, user string, prize int64, key, rid string, call, ret int64, code int, body map[string]any, err error) history.Op {
	op := history.Op{Client: client, Kind: history.Grab, User: user, Prize: prize, Key: key, RID: rid, Call: call, Return: ret, Code: code}
	if err != nil {
		op.Code, op.Err = 0, err.Error()
		return op
	}
	if got, _ := body["request_id"].(string); got != "" {
		op.RID = got // the gateway's word, should it ever differ from the derivation
	}
	if code == http.StatusAccepted {
		st, _ := body["status"].(string)
		reason, _ := body["reason"].(string)
		op.Out = joinReason(st, reason)
	} else {
		op.Out, _ = body["error"].(string)
	}
	return op
}

func joinReason(status, reason string) string {
	if reason == "" {
		return status
	}
	return status + "/" + reason
}

// retryAfter reads an answer's Retry-After in seconds (0 when absent or not a number).
func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// pollTries bounds Poll's retries of a 429 or 503 (about pollTries seconds at the
// gateway's Retry-After of 1 s).
const pollTries = 15

// Poll reads one grab's status as its owner sees it. A 429 (the user's rate limit: a
// user's several grabs checked at once can exceed it) or a 503 says "ask again later", not
// anything about the grab, so it is asked again after Retry-After, a bounded number of
// times; any other answer but 200 is an error.
func Poll(ctx context.Context, target, token, requestID string) (string, string, error) {
	return PollAs(ctx, Reader{}, target, token, requestID)
}

// Reader says who reads a status, for the row's history: every attempt is recorded when
// History is set. Tries bounds the attempts (0: pollTries).
type Reader struct {
	History *history.Recorder
	Client  int
	User    string
	Prize   int64
	Tries   int
}

// PollAs is Poll as r: each attempt is an operation of r.History.
func PollAs(ctx context.Context, r Reader, target, token, requestID string) (string, string, error) {
	tries := r.Tries
	if tries <= 0 {
		tries = pollTries
	}
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/api/v1/grabs/"+requestID, nil)
		if err != nil {
			return "", "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		call := r.History.Now()
		resp, err := crowdClient.Do(req)
		if err != nil {
			r.History.Add(history.Op{Client: r.Client, Kind: history.Status, User: r.User, Prize: r.Prize, RID: requestID,
				Call: call, Return: r.History.Now(), Err: err.Error()})
			return "", "", err
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		st, _ := body["status"].(string)
		reason, _ := body["reason"].(string)
		out, _ := body["error"].(string)
		if resp.StatusCode == http.StatusOK {
			out = joinReason(st, reason)
		}
		r.History.Add(history.Op{Client: r.Client, Kind: history.Status, User: r.User, Prize: r.Prize, RID: requestID,
			Call: call, Return: r.History.Now(), Code: resp.StatusCode, Out: out})
		switch {
		case resp.StatusCode == http.StatusOK:
			return st, reason, nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && try < tries:
			wait := time.Second
			if ra := retryAfter(resp.Header); ra > 0 {
				wait = min(ra, 5*time.Second)
			}
			select {
			case <-ctx.Done():
				return "", "", ctx.Err()
			case <-time.After(wait):
			}
		default:
			return "", "", fmt.Errorf("status %d %v (after %d tries)", resp.StatusCode, body, try)
		}
	}
}
