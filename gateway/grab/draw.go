package grab

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/gateway/schedule"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// drawWindows says which session×prizes give their units by a draw (schedule.Cache).
type drawWindows interface {
	Draw(sessionID, prizeID int64) (windowEnd time.Time, ok bool)
}

// Entrance records entries (*draw.Entries).
type Entrance interface {
	Enter(ctx context.Context, sessionID, prizeID int64, user string, now time.Time) (draw.EnterResult, error)
}

// DrawBoard is the draws' public side (*draw.Public).
type DrawBoard interface {
	Record(ctx context.Context, sessionID, prizeID int64) (draw.Record, error)
	Proof(ctx context.Context, sessionID, prizeID int64, user string) (draw.Proof, error)
	Standing(ctx context.Context, sessionID, prizeID int64, user string) (draw.Status, bool, error)
	Entered(ctx context.Context, sessionID, prizeID int64, user string) (bool, error)
	PollAfter(windowEnd time.Time) time.Duration
}

// drawView is the answer to an entry and to a poll of a draw's request id.
type drawView struct {
	RequestID string `json:"request_id"`
	Status    string `json:"status"`
	// PollAfter is how many seconds to wait before polling (entered: until the draw).
	PollAfter int `json:"poll_after,omitempty"`
	// Place is the entrant's place in the ranking, from the draw on; WaitlistPosition how
	// many places are before theirs to be offered a returned unit.
	Place            int    `json:"place,omitempty"`
	WaitlistPosition int    `json:"waitlist_position,omitempty"`
	OrderID          int64  `json:"order_id,omitempty"`
	Reason           string `json:"reason,omitempty"`
}

var (
	earlyAnswer = jsonapi.Encode(http.StatusConflict, jsonapi.Error{Code: "not_open",
		Message: "the draw's entries open at the session's start; entries before it are refused and counted"})
	entryClosedAnswer = jsonapi.Encode(http.StatusConflict, jsonapi.Error{Code: "entry_closed",
		Message: "the draw's entry window has closed; an entrant polls the request id of their entry, or presses again with their Idempotency-Key"})
)

// enterDraw answers a grab of a draw prize: during the window it records the user's entry
// (one Redis round trip, no Kafka write) and answers 202 entered with the request id to
// poll; before it, the attempt is refused and counted; after it, an entrant hears their
// standing and anybody else that entries are closed. It returns false when the draw is
// over and what is left goes first come, first served: the caller goes on as for any grab.
func (a *API) enterDraw(w http.ResponseWriter, r *http.Request, in grabInput, user string, now, windowEnd time.Time) bool {
	start := time.Now()
	res, err := a.entries.Enter(r.Context(), in.SessionID, in.PrizeID, user, now)
	a.observe(r.Context(), a.metrics.redis.WithLabelValues("enter"), time.Since(start).Seconds())
	if err != nil {
		a.metrics.redisErrors.WithLabelValues("enter").Inc()
		a.fail(r.Context(), w, "grab", err)
		return true
	}
	rid := seckill.DrawRequestID(in.SessionID, in.PrizeID, user)
	switch res.Code {
	case draw.Entered, draw.Again:
		outcome := "entered"
		if res.Code == draw.Again {
			outcome = "entered_again"
		}
		a.metrics.grabs.WithLabelValues(outcome).Inc()
		w.Header().Set("Location", statusPath(rid))
		jsonapi.Write(w, http.StatusAccepted, drawView{RequestID: rid, Status: "entered",
			PollAfter: int(a.board.PollAfter(windowEnd) / time.Second)})
	case draw.Early:
		a.metrics.grabs.WithLabelValues("early").Inc()
		jsonapi.WriteEncoded(w, earlyAnswer)
	case draw.Closed:
		if res.At.IsZero() {
			// Public from now on until the units go first come: the presses after the window
			// without a key are answered from memory (publicFirst), like those after a sell-out.
			a.closedDraws.Set(in.SessionID, in.PrizeID, now)
			a.metrics.grabs.WithLabelValues("entry_closed").Inc()
			jsonapi.WriteEncoded(w, entryClosedAnswer)
			return true
		}
		v, found, err := a.existing(r.Context(), rid, user)
		switch {
		case err != nil:
			a.fail(r.Context(), w, "grab", err)
		case !found:
			// Entered, and the freeze has not copied the entry yet.
			jsonapi.Write(w, http.StatusAccepted, drawView{RequestID: rid, Status: "entered", PollAfter: 1})
		default:
			a.metrics.grabs.WithLabelValues("repeat").Inc()
			jsonapi.Write(w, http.StatusAccepted, v)
		}
	case draw.NotArmed:
		if now.Before(windowEnd) && a.schedule.Check(in.SessionID, in.PrizeID, now) != nil {
			// Before the session's start, not yet preheated: not open, as for any prize, rather
			// than a "retry in a second" that a crowd waiting for hours would take at its word.
			a.metrics.notOpenGrabs.Inc()
			jsonapi.WriteEncoded(w, notOpenAnswer)
			return true
		}
		a.metrics.grabs.WithLabelValues("not_loaded").Inc()
		w.Header().Set("Retry-After", "1")
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "not_loaded", "the draw is not ready right now; retry shortly")
	case draw.FirstCome:
		return false
	}
	return true
}

// drawStatus is the status of a draw's request id that Redis's reservations and MySQL's
// orders do not know: the entrant's standing (entered, waitlisted, skipped). Someone else's
// draw request id is "not found", like any other user's grab.
func (a *API) drawStatus(ctx context.Context, rid, user string) (any, bool, error) {
	sid, pid, _, err := seckill.ParseRequestID(rid)
	if err != nil || a.board == nil || seckill.DrawRequestID(sid, pid, user) != rid {
		return nil, false, nil
	}
	st, ok, err := a.board.Standing(ctx, sid, pid, user)
	if err != nil || !ok {
		return nil, false, err
	}
	return drawView{RequestID: rid, Status: st.State, Place: st.Place, WaitlistPosition: st.WaitlistPosition,
		PollAfter: int(st.PollAfter / time.Second), Reason: st.Reason}, true, nil
}

// windowStatus answers a poll of a draw's request id while its entry window is open from
// Redis alone (a crowd of entrants polls then, and nothing but the entry can be known):
// handled is false outside the window, and for anything but a draw prize's request id.
func (a *API) windowStatus(ctx context.Context, rid, user string) (v drawView, found, handled bool, err error) {
	if a.board == nil || !seckill.IsDrawRequestID(rid) {
		return drawView{}, false, false, nil
	}
	sid, pid, _, perr := seckill.ParseRequestID(rid)
	end, ok := a.drawWindow(sid, pid)
	if perr != nil || !ok || !a.now().Before(end) {
		return drawView{}, false, false, nil
	}
	if seckill.DrawRequestID(sid, pid, user) != rid {
		return drawView{}, false, true, nil // someone else's entry: not found, like any other grab
	}
	entered, err := a.board.Entered(ctx, sid, pid, user)
	if err != nil || !entered {
		return drawView{}, false, true, err
	}
	return drawView{RequestID: rid, Status: "entered", PollAfter: int(a.board.PollAfter(end) / time.Second)}, true, true, nil
}

// drawRoutes are the draw's public record (anyone) and an entrant's proof (the entrant).
func (a *API) drawRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/sessions/{session}/prizes/{prize}/draw", a.guard("draw", http.HandlerFunc(a.drawRecord)))
	mux.Handle("GET /api/v1/sessions/{session}/prizes/{prize}/draw/proof", a.guard("draw_proof", http.HandlerFunc(a.drawProof)))
}

func (a *API) drawIDs(w http.ResponseWriter, r *http.Request) (int64, int64, bool) {
	sid, err1 := jsonapi.ParseID(r.PathValue("session"))
	pid, err2 := jsonapi.ParseID(r.PathValue("prize"))
	if err1 != nil || err2 != nil {
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such draw")
		return 0, 0, false
	}
	return sid, pid, true
}

// drawRecord serves a draw's public record: anyone may read it, so anyone can check it.
func (a *API) drawRecord(w http.ResponseWriter, r *http.Request) {
	sid, pid, ok := a.drawIDs(w, r)
	if !ok {
		return
	}
	rec, err := a.board.Record(r.Context(), sid, pid)
	switch {
	case errors.Is(err, seckill.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no draw for this session and prize (yet: it is committed at the preheat)")
	case err != nil:
		a.fail(r.Context(), w, "draw", err)
	default:
		jsonapi.Write(w, http.StatusOK, rec)
	}
}

// drawProof serves the caller's own proof: their entry's path in the frozen tree and, once
// drawn, their ranking value and place. Only the entrant may read it (the salt in it would
// let others test whether that user entered).
func (a *API) drawProof(w http.ResponseWriter, r *http.Request) {
	user, ok := a.limitedUser(w, r)
	if !ok {
		return
	}
	sid, pid, ok := a.drawIDs(w, r)
	if !ok {
		return
	}
	p, err := a.board.Proof(r.Context(), sid, pid, user)
	switch {
	case errors.Is(err, seckill.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "you did not enter this draw")
	case errors.Is(err, draw.ErrNotFrozen):
		w.Header().Set("Retry-After", "1")
		jsonapi.WriteError(w, http.StatusConflict, "not_frozen", "the entry set is frozen when the window closes; ask again then")
	case err != nil:
		a.fail(r.Context(), w, "draw_proof", err)
	default:
		jsonapi.Write(w, http.StatusOK, p)
	}
}

// isNotStarted reports a schedule verdict of a session that has not started.
func isNotStarted(err error) bool { return errors.Is(err, schedule.ErrNotStarted) }

// drawWindow returns the end of a draw prize's entry window; false for a first-come prize
// or a gateway without draws.
func (a *API) drawWindow(sessionID, prizeID int64) (time.Time, bool) {
	if a.entries == nil {
		return time.Time{}, false
	}
	return a.schedule.Draw(sessionID, prizeID)
}

func (a *API) isDraw(sessionID, prizeID int64) bool {
	_, ok := a.drawWindow(sessionID, prizeID)
	return ok
}
