package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// caseStore is what the exceptions workbench needs from MySQL: a *store.Exceptions.
type caseStore interface {
	List(ctx context.Context, f store.CaseFilter) ([]store.Case, error)
	Get(ctx context.Context, id int64) (store.CaseDetail, error)
	Act(ctx context.Context, id int64, action, actor, remote, note string, at time.Time, replay store.Replay) (store.CaseDetail, error)
}

type orderReader interface {
	Existing(ctx context.Context, requestIDs []string) (map[string]seckill.Order, error)
}

type runReader interface {
	Recent(ctx context.Context, limit int) ([]store.RunReport, error)
}

// workbench serves the exceptions workbench and the reconciler's reports on the admin
// listener, behind the admin credential.
type workbench struct {
	cases   caseStore
	orders  orderReader
	runs    runReader
	replay  store.Replay // produces a case's events again (an *exception.Replayer's Replay)
	fail    func(w http.ResponseWriter, r *http.Request, err error)
	onActed func(action, kind string, refused bool)
	now     func() time.Time
}

func (b *workbench) register(a *API, mux *http.ServeMux) {
	a.handle(mux, "GET /admin/v1/exceptions", b.list)
	a.handle(mux, "GET /admin/v1/exceptions/{id}", b.show)
	a.handle(mux, "POST /admin/v1/exceptions/{id}/{action}", b.act)
	a.handle(mux, "GET /admin/v1/reconciler/reports", b.reports)
}

var caseStates = map[string]bool{"": true, seckill.CaseOpen: true, seckill.CaseReplayed: true,
	seckill.CaseResolved: true, seckill.CaseDismissed: true}

func (b *workbench) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.CaseFilter{State: q.Get("state"), Kind: q.Get("kind")}
	var verr seckill.ValidationError
	// A filter given empty is refused, not read as "no filter": the document says what a
	// filter holds, and a script that sends ?kind= with an unset variable should hear so.
	for _, name := range []string{"state", "kind", "session_id", "limit"} {
		if q.Has(name) && q.Get(name) == "" {
			verr = append(verr, seckill.FieldError{Field: name, Message: "empty: leave the filter out instead"})
		}
	}
	if !caseStates[f.State] {
		verr = append(verr, seckill.FieldError{Field: "state", Message: "must be open, replayed, resolved or dismissed (or empty for all)"})
	}
	if len(f.Kind) > 64 {
		verr = append(verr, seckill.FieldError{Field: "kind", Message: "at most 64 characters"})
	}
	if v := q.Get("session_id"); v != "" {
		id, err := jsonapi.ParseID(v)
		if err != nil {
			verr = append(verr, seckill.FieldError{Field: "session_id", Message: "must be a positive integer"})
		}
		f.SessionID = id
	}
	if n, ferr := queryLimit(q.Get("limit"), 100, 500); ferr != nil {
		verr = append(verr, *ferr)
	} else {
		f.Limit = n
	}
	if len(verr) > 0 {
		jsonapi.BadInput(w, verr)
		return
	}
	cases, err := b.cases.List(r.Context(), f)
	if err != nil {
		b.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"cases": cases})
}

// caseView is a case with its evidence, history, and the order of its request id (if any).
type caseView struct {
	store.CaseDetail
	Order *orderView `json:"order"`
}

// orderView is an order as the admin API shows it.
type orderView struct {
	ID          int64      `json:"id"`
	RequestID   string     `json:"request_id"`
	UserID      string     `json:"user_id"`
	SessionID   int64      `json:"session_id"`
	PrizeID     int64      `json:"prize_id"`
	Status      string     `json:"status"`
	Reason      string     `json:"reason"`
	AdmittedAt  time.Time  `json:"admitted_at"`
	CreatedAt   time.Time  `json:"created_at"`
	PaidAt      *time.Time `json:"paid_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
	HoldsSlot   bool       `json:"holds_slot"`
}

func viewOrder(o seckill.Order) *orderView {
	return &orderView{ID: o.ID, RequestID: o.RequestID, UserID: o.UserID, SessionID: o.SessionID, PrizeID: o.PrizeID,
		Status: string(o.Status), Reason: string(o.Reason), AdmittedAt: o.AdmittedAt.UTC(), CreatedAt: o.CreatedAt.UTC(),
		PaidAt: o.PaidAt, CancelledAt: o.CancelledAt, HoldsSlot: o.HoldsSlot}
}

func (b *workbench) view(ctx context.Context, d store.CaseDetail) (caseView, error) {
	v := caseView{CaseDetail: d}
	if d.RequestID == "" {
		return v, nil
	}
	orders, err := b.orders.Existing(ctx, []string{d.RequestID})
	if err != nil {
		return v, err
	}
	if o, ok := orders[d.RequestID]; ok {
		v.Order = viewOrder(o)
	}
	return v, nil
}

func (b *workbench) show(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	d, err := b.cases.Get(r.Context(), id)
	if err != nil {
		b.fail(w, r, err)
		return
	}
	v, err := b.view(r.Context(), d)
	if err != nil {
		b.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

type actionInput struct {
	Note string `json:"note"`
}

func (b *workbench) act(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	action := r.PathValue("action")
	if action != store.ActReplay && action != store.ActResolve && action != store.ActDismiss {
		jsonapi.WriteError(w, http.StatusNotFound, "not_found", "no such action: want replay, resolve or dismiss")
		return
	}
	var in actionInput
	if r.ContentLength != 0 {
		if err := jsonapi.DecodeStrict(w, r, adminBodyLimit, &in); err != nil {
			jsonapi.BadInput(w, err)
			return
		}
	}
	if utf8.RuneCountInString(in.Note) > 1024 || (action != store.ActReplay && !jsonapi.TextOK(in.Note, 1024)) {
		jsonapi.BadInput(w, seckill.ValidationError{{Field: "note", Message: "must be 1 to 1024 characters: say why (it goes to the case's audit)"}})
		return
	}
	in.Note = strings.Trim(in.Note, jsonapi.Blank)
	d, err := b.cases.Act(r.Context(), id, action, actor(r), remoteAddr(r), in.Note, b.now(), b.replay)
	refused := errors.Is(err, store.ErrNotReplayable)
	if err == nil || refused {
		b.onActed(action, d.Kind, refused)
	}
	switch {
	case refused:
		jsonapi.Write(w, http.StatusConflict, jsonapi.Error{Code: "not_replayable", Message: err.Error()})
		return
	case errors.Is(err, store.ErrCaseClosed):
		jsonapi.Write(w, http.StatusConflict, jsonapi.Error{Code: "case_closed", Message: err.Error()})
		return
	case err != nil:
		b.fail(w, r, err)
		return
	}
	v, err := b.view(r.Context(), d)
	if err != nil {
		b.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

func (b *workbench) reports(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ferr := queryLimit(q.Get("limit"), 20, 200)
	if ferr == nil && q.Has("limit") && q.Get("limit") == "" {
		ferr = &seckill.FieldError{Field: "limit", Message: "empty: leave it out instead"}
	}
	if ferr != nil {
		jsonapi.BadInput(w, seckill.ValidationError{*ferr})
		return
	}
	runs, err := b.runs.Recent(r.Context(), limit)
	if err != nil {
		b.fail(w, r, err)
		return
	}
	out := make([]map[string]any, 0, len(runs))
	for _, run := range runs {
		// The report is stored as the reconciler printed it with --json; the console gets its
		// fields plus the row's id and whether the run failed.
		m := map[string]any{}
		if err := json.Unmarshal(run.Report, &m); err != nil {
			m = map[string]any{"started_at": run.StartedAt, "unreadable": err.Error()}
		}
		m["id"], m["failed"] = run.ID, run.Failed
		out = append(out, m)
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"reports": out})
}

// queryLimit reads a ?limit= of 1 to most in canonical decimal (as path ids), def when absent.
func queryLimit(v string, def, most int64) (int, *seckill.FieldError) {
	if v == "" {
		return int(def), nil
	}
	n, err := jsonapi.ParseID(v)
	if err != nil || n > most {
		return 0, &seckill.FieldError{Field: "limit", Message: fmt.Sprintf("must be 1 to %d", most)}
	}
	return int(n), nil
}
