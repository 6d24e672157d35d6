package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/seckill-pipeline/seckill/gateway/jsonapi"
	"github.com/seckill-pipeline/seckill/pkg/draw"
	"github.com/seckill-pipeline/seckill/pkg/seckill"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// drawBook is what the draw's admin routes read and write (*store.Draws).
type drawBook interface {
	Draw(ctx context.Context, sessionID, prizeID int64) (store.Draw, error)
	Values(ctx context.Context, sessionID, prizeID int64) ([][32]byte, error)
	Counts(ctx context.Context, sessionID, prizeID int64) (store.DrawCounts, error)
	Ranked(ctx context.Context, sessionID, prizeID int64, from, limit int) ([]store.DrawEntry, error)
	SetBeaconSignature(ctx context.Context, sessionID, prizeID int64, signature string) error
}

// auditor appends to the audit log (*store.Catalog).
type auditor interface {
	Record(ctx context.Context, e store.AuditEntry) error
}

// drawAdmin serves a draw to operators: the record with the entrants' counts and the first
// winners (the console's draw panel), and the beacon signature an operator supplies.
type drawAdmin struct {
	book  drawBook
	audit auditor
	fail  func(w http.ResponseWriter, r *http.Request, err error)
}

func (d *drawAdmin) register(a *API, mux *http.ServeMux) {
	if d.book == nil {
		return
	}
	a.handle(mux, "GET /admin/v1/sessions/{id}/prizes/{prize}/draw", d.get)
	a.handle(mux, "PUT /admin/v1/sessions/{id}/prizes/{prize}/draw/beacon", d.putBeacon)
}

// drawPanel is the operator's view of one draw.
type drawPanel struct {
	Record draw.Record `json:"record"`
	// Entrants counts the stored entrants by state (after the freeze); EarlyRefused sums the
	// entries they tried before the window.
	Entrants     map[string]int `json:"entrants"`
	EarlyRefused int64          `json:"early_refused"`
	// Winners are the first places offered a unit, in rank order (at most 100).
	Winners []drawWinner `json:"winners"`
}

type drawWinner struct {
	Place int    `json:"place"`
	User  string `json:"user_id"`
	State string `json:"state"`
}

func (d *drawAdmin) get(w http.ResponseWriter, r *http.Request) {
	sid, pid, ok := sessionPrizePath(w, r)
	if !ok {
		return
	}
	dr, err := d.book.Draw(r.Context(), sid, pid)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var values [][32]byte
	if dr.Phase == string(draw.PhaseDrawn) {
		if values, err = d.book.Values(r.Context(), sid, pid); err != nil {
			d.fail(w, r, err)
			return
		}
	}
	rec, err := draw.RecordOf(dr, values)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	counts, err := d.book.Counts(r.Context(), sid, pid)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	panel := drawPanel{Record: rec, Entrants: counts.ByState, EarlyRefused: counts.Early, Winners: []drawWinner{}}
	if dr.Cutoff > 0 {
		top, err := d.book.Ranked(r.Context(), sid, pid, 1, min(dr.Cutoff, 100))
		if err != nil {
			d.fail(w, r, err)
			return
		}
		for _, e := range top {
			panel.Winners = append(panel.Winners, drawWinner{Place: e.Place, User: e.User, State: e.State})
		}
	}
	jsonapi.Write(w, http.StatusOK, panel)
}

type beaconInput struct {
	Signature string `json:"signature"`
}

// putBeacon stores the signature of the draw's committed beacon round, once drand's
// verification accepts it against the public key named at the commitment: the draw waits
// for it, and nobody (the operator included) could have known it before the freeze.
func (d *drawAdmin) putBeacon(w http.ResponseWriter, r *http.Request) {
	sid, pid, ok := sessionPrizePath(w, r)
	if !ok {
		return
	}
	var in beaconInput
	if err := jsonapi.DecodeStrict(w, r, adminBodyLimit, &in); err != nil {
		jsonapi.BadInput(w, err)
		return
	}
	dr, err := d.book.Draw(r.Context(), sid, pid)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if dr.BeaconRound == 0 {
		d.fail(w, r, fmt.Errorf("the draw of session %d prize %d names no beacon round: %w", sid, pid, seckill.ErrConflict))
		return
	}
	checker, err := draw.NewDrand(dr.BeaconScheme, dr.BeaconPublicKey)
	if err == nil {
		_, err = checker.Check(draw.BeaconRef{Scheme: dr.BeaconScheme, PublicKey: dr.BeaconPublicKey, Round: dr.BeaconRound,
			Signature: in.Signature})
	}
	if err != nil {
		jsonapi.BadInput(w, seckill.ValidationError{{Field: "signature",
			Message: fmt.Sprintf("not the beacon's signature of round %d: %s", dr.BeaconRound, err.Error())}})
		return
	}
	if err := d.book.SetBeaconSignature(r.Context(), sid, pid, in.Signature); err != nil {
		d.fail(w, r, err)
		return
	}
	round := int64(dr.BeaconRound)
	if err := d.audit.Record(r.Context(), store.AuditEntry{Actor: actor(r), RemoteAddr: remoteAddr(r), Action: "draw_beacon",
		SessionID: &sid, PrizeID: &pid, After: &round, Detail: "signature " + in.Signature}); err != nil && !errors.Is(err, context.Canceled) {
		d.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"session_id": sid, "prize_id": pid, "round": dr.BeaconRound, "stored": true})
}
