package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// maxEvidence bounds a case's evidence (the column is a MEDIUMTEXT); larger evidence is
// replaced by a note saying so, so a flood of huge poison messages cannot bloat the table.
const maxEvidence = 256 << 10

type exceptionRow struct {
	ID             int64 `gorm:"primaryKey"`
	Kind           string
	CaseKey        string
	RequestID      string
	SessionID      *int64
	PrizeID        *int64
	UserID         string
	Detail         string
	Evidence       *string
	FirstSeenAt    time.Time
	LastSeenAt     time.Time
	Seen           int
	State          string
	StateChangedBy string
	StateChangedAt *time.Time
	StateNote      string
}

func (exceptionRow) TableName() string { return "exception_cases" }

// reopened is true for the states a case leaves when it is seen again: the replay or the
// resolution did not fix it. A dismissed case stays dismissed (a person said to ignore it).
const reopened = "state IN ('" + seckill.CaseReplayed + "', '" + seckill.CaseResolved + "')"

// saveCases records exception cases, one row per kind×key: seeing one again moves
// last_seen_at, counts it, keeps the newest detail and evidence, and reopens it if it had
// been replayed or resolved.
//
// The rows go in as many INSERTs as the server's max_allowed_packet needs (read from the
// server each time: cases are rare, and the setting is the server's to change): a thousand
// poison messages' cases in one statement were refused as too large, retried forever, and
// the partition they came from stopped. Run it in a transaction: the statements then land
// together or not at all.
func saveCases(tx *gorm.DB, cases []exceptionRow) error {
	if len(cases) == 0 {
		return nil
	}
	var packet int64
	if err := tx.Raw("SELECT @@max_allowed_packet").Row().Scan(&packet); err != nil {
		return fmt.Errorf("record exception cases: read max_allowed_packet: %w", err)
	}
	limit := statementBudget(packet)
	for i := range cases {
		if cases[i].CaseKey == "" {
			cases[i].CaseKey = cases[i].RequestID
		}
		cases[i].State = seckill.CaseOpen
		cases[i].Detail = truncate(cases[i].Detail, 1024)
		if cases[i].sqlSize() > limit && cases[i].Evidence != nil {
			note := fmt.Sprintf(`{"truncated":"evidence of %d bytes did not fit the server's max_allowed_packet (%d); see the detail and the source"}`,
				len(*cases[i].Evidence), packet)
			cases[i].Evidence = &note
		}
	}
	for _, part := range splitBySize(cases, limit, exceptionRow.sqlSize) {
		if err := upsertCases(tx, part); err != nil {
			return err
		}
	}
	return nil
}

// statementBudget is how large one INSERT of cases may be for a server whose
// max_allowed_packet is packet: half of it (what sqlSize does not count: the statement's
// own text, escapes beyond the doubling), and never above 8 MiB, which keeps a statement's
// memory in the process bounded whatever the server allows.
func statementBudget(packet int64) int {
	return int(min(packet/2, 8<<20))
}

// sqlSize bounds the bytes the row adds to an INSERT: every string escaped at worst
// (each byte doubled), plus the fixed columns.
func (r exceptionRow) sqlSize() int {
	n := len(r.Kind) + len(r.CaseKey) + len(r.RequestID) + len(r.UserID) + len(r.Detail) + len(r.State) +
		len(r.StateChangedBy) + len(r.StateNote)
	if r.Evidence != nil {
		n += len(*r.Evidence)
	}
	return 2*n + 256
}

// splitBySize cuts rows into runs whose sizes add up to at most limit each (a row larger
// than limit alone makes a run of one) and of at most 500 rows (16 placeholders a row stay
// far below the protocol's 65,535).
func splitBySize[T any](rows []T, limit int, size func(T) int) [][]T {
	var out [][]T
	start, sum := 0, 0
	for i, r := range rows {
		n := size(r)
		if i > start && (sum+n > limit || i-start == 500) {
			out = append(out, rows[start:i])
			start, sum = i, 0
		}
		sum += n
	}
	return append(out, rows[start:])
}

// upsertCases is one INSERT of cases. The assignments run in order (MariaDB applies them
// left to right, each seeing the ones before), so state is set last, after the others read it.
func upsertCases(tx *gorm.DB, cases []exceptionRow) error {
	err := tx.Clauses(clause.OnConflict{DoUpdates: clause.Set{
		{Column: clause.Column{Name: "last_seen_at"}, Value: gorm.Expr("VALUES(last_seen_at)")},
		{Column: clause.Column{Name: "detail"}, Value: gorm.Expr("VALUES(detail)")},
		{Column: clause.Column{Name: "evidence"}, Value: gorm.Expr("COALESCE(VALUES(evidence), evidence)")},
		{Column: clause.Column{Name: "seen"}, Value: gorm.Expr("seen + 1")},
		{Column: clause.Column{Name: "state_note"}, Value: gorm.Expr("IF(" + reopened + ", CONCAT('seen again after it was ', state), state_note)")},
		{Column: clause.Column{Name: "state_changed_by"}, Value: gorm.Expr("IF(" + reopened + ", 'system', state_changed_by)")},
		{Column: clause.Column{Name: "state_changed_at"}, Value: gorm.Expr("IF(" + reopened + ", VALUES(last_seen_at), state_changed_at)")},
		{Column: clause.Column{Name: "state"}, Value: gorm.Expr("IF(" + reopened + ", 'open', state)")},
	}}).Create(&cases).Error
	if err != nil {
		return fmt.Errorf("record exception cases: %w", err)
	}
	return nil
}

// CaseReport is one detected exception, as its detector reports it.
type CaseReport struct {
	Kind string
	// Key identifies the case within its kind (a request id, a dead letter's source, a
	// session×prize): reporting the same key again updates the one case. Empty: RequestID.
	Key                string
	SessionID, PrizeID int64 // 0: not about one session×prize
	RequestID, UserID  string
	Detail             string // one line a person reads first
	Evidence           any    // marshalled to JSON: what a person needs to judge the case
}

func (r CaseReport) row(at time.Time) (exceptionRow, error) {
	row := exceptionRow{Kind: r.Kind, CaseKey: r.Key, RequestID: r.RequestID, UserID: r.UserID, Detail: r.Detail,
		FirstSeenAt: at.UTC(), LastSeenAt: at.UTC(), Seen: 1}
	if r.Kind == "" || (r.Key == "" && r.RequestID == "") {
		return row, fmt.Errorf("exception case %+v: a kind and a key or request id are required", r)
	}
	if r.SessionID > 0 {
		row.SessionID = &r.SessionID
	}
	if r.PrizeID > 0 {
		row.PrizeID = &r.PrizeID
	}
	if r.Evidence != nil {
		b, err := json.Marshal(r.Evidence)
		if err != nil {
			return row, fmt.Errorf("exception case %s/%s evidence: %w", r.Kind, r.Key, err)
		}
		if len(b) > maxEvidence {
			b, _ = json.Marshal(map[string]any{"truncated": fmt.Sprintf("evidence of %d bytes exceeded %d; see the detail and the source", len(b), maxEvidence)})
		}
		s := string(b)
		row.Evidence = &s
	}
	return row, nil
}

// Case is one exception case, as the workbench shows it.
type Case struct {
	ID             int64      `json:"id"`
	Kind           string     `json:"kind"`
	Key            string     `json:"key"`
	State          string     `json:"state"`
	SessionID      *int64     `json:"session_id"`
	PrizeID        *int64     `json:"prize_id"`
	RequestID      string     `json:"request_id"`
	UserID         string     `json:"user_id"`
	Detail         string     `json:"detail"`
	FirstSeen      time.Time  `json:"first_seen"`
	LastSeen       time.Time  `json:"last_seen"`
	Seen           int        `json:"seen"`
	Replayable     bool       `json:"replayable"`
	StateChangedBy string     `json:"state_changed_by"`
	StateChangedAt *time.Time `json:"state_changed_at"`
	StateNote      string     `json:"state_note"`
}

// CaseAction is one operator action on a case, refused ones included.
type CaseAction struct {
	At    time.Time `json:"at"`
	Actor string    `json:"actor"`
	// RemoteAddr is the address the action came from ("" for actions recorded before it was).
	RemoteAddr string `json:"remote_addr"`
	Action     string `json:"action"`
	Note       string `json:"note"`
	Outcome    string `json:"outcome"`
}

// CaseDetail is a case with its evidence and its history.
type CaseDetail struct {
	Case
	Evidence json.RawMessage `json:"evidence"`
	Actions  []CaseAction    `json:"actions"`
}

func (r exceptionRow) public() Case {
	c := Case{ID: r.ID, Kind: r.Kind, Key: r.CaseKey, State: r.State, SessionID: r.SessionID, PrizeID: r.PrizeID,
		RequestID: r.RequestID, UserID: r.UserID, Detail: r.Detail, FirstSeen: r.FirstSeenAt.UTC(),
		LastSeen: r.LastSeenAt.UTC(), Seen: r.Seen, Replayable: seckill.CaseReplayable(r.Kind),
		StateChangedBy: r.StateChangedBy, StateNote: r.StateNote}
	if r.StateChangedAt != nil {
		t := r.StateChangedAt.UTC()
		c.StateChangedAt = &t
	}
	return c
}

// Exceptions is the exceptions workbench's store: detectors record cases, people act on them.
type Exceptions struct {
	db *gorm.DB
}

// NewExceptions returns Exceptions on db.
func NewExceptions(db *gorm.DB) *Exceptions { return &Exceptions{db: db} }

// Record records cases seen at at, idempotently per kind×key (see saveCases), in one
// transaction.
func (e *Exceptions) Record(ctx context.Context, at time.Time, reports ...CaseReport) error {
	rows := make([]exceptionRow, 0, len(reports))
	for _, r := range reports {
		row, err := r.row(at)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil
	}
	return e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return saveCases(tx, rows) })
}

// CaseFilter selects cases; zero fields select all. Limit is capped at 500.
type CaseFilter struct {
	State     string
	Kind      string
	SessionID int64
	Limit     int
}

// List returns the cases f selects, the most recently seen first.
func (e *Exceptions) List(ctx context.Context, f CaseFilter) ([]Case, error) {
	q := e.db.WithContext(ctx).Order("last_seen_at DESC, id DESC").Limit(min(max(f.Limit, 1), 500))
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.Kind != "" {
		q = q.Where("kind = ?", f.Kind)
	}
	if f.SessionID > 0 {
		q = q.Where("session_id = ?", f.SessionID)
	}
	var rows []exceptionRow
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("exception cases: %w", err)
	}
	out := make([]Case, len(rows))
	for i, r := range rows {
		out[i] = r.public()
	}
	return out, nil
}

// Get returns case id with its evidence and actions, or seckill.ErrNotFound.
func (e *Exceptions) Get(ctx context.Context, id int64) (CaseDetail, error) {
	var row exceptionRow
	if err := first(e.db.WithContext(ctx).Where("id = ?", id), &row); err != nil {
		return CaseDetail{}, fmt.Errorf("exception case %d: %w", id, err)
	}
	return e.detail(e.db.WithContext(ctx), row)
}

func (e *Exceptions) detail(tx *gorm.DB, row exceptionRow) (CaseDetail, error) {
	d := CaseDetail{Case: row.public(), Evidence: json.RawMessage("null"), Actions: []CaseAction{}}
	if row.Evidence != nil && json.Valid([]byte(*row.Evidence)) {
		d.Evidence = json.RawMessage(*row.Evidence)
	}
	var acts []actionRow
	if err := tx.Where("case_id = ?", row.ID).Order("id").Find(&acts).Error; err != nil {
		return d, fmt.Errorf("actions of exception case %d: %w", row.ID, err)
	}
	for _, a := range acts {
		d.Actions = append(d.Actions, CaseAction{At: a.At.UTC(), Actor: a.Actor, RemoteAddr: a.RemoteAddr, Action: a.Action, Note: a.Note, Outcome: a.Outcome})
	}
	return d, nil
}

// CountByKind returns how many cases there are of each kind, whatever their state.
func (e *Exceptions) CountByKind(ctx context.Context) (map[string]int, error) {
	return e.count(ctx, "")
}

// OpenByKind returns how many open cases there are of each kind.
func (e *Exceptions) OpenByKind(ctx context.Context) (map[string]int, error) {
	return e.count(ctx, seckill.CaseOpen)
}

func (e *Exceptions) count(ctx context.Context, state string) (map[string]int, error) {
	var rows []struct {
		Kind string
		N    int
	}
	q := e.db.WithContext(ctx).Table("exception_cases").Select("kind, COUNT(*) AS n").Group("kind")
	if state != "" {
		q = q.Where("state = ?", state)
	}
	if err := q.Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("exception cases by kind: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Kind] = r.N
	}
	return out, nil
}

type actionRow struct {
	ID         int64 `gorm:"primaryKey"`
	CaseID     int64
	At         time.Time
	Actor      string
	RemoteAddr string
	Action     string
	Note       string
	Outcome    string
}

func (actionRow) TableName() string { return "exception_actions" }

// Operator actions on a case.
const (
	ActReplay  = "replay"
	ActResolve = "resolve"
	ActDismiss = "dismiss"
)

var (
	// ErrCaseClosed is returned for an action on a case a person already closed another way
	// (replaying a resolved case, dismissing a resolved one, ...).
	ErrCaseClosed = fmt.Errorf("exception case is closed: %w", seckill.ErrConflict)
	// ErrNotReplayable wraps the reason a replay was refused: the case no longer applies
	// (its order exists, the reservation is gone) or its cause is still there.
	ErrNotReplayable = errors.New("not replayable")
)

// Replay produces a case's events again, or refuses with an error wrapping ErrNotReplayable.
type Replay func(ctx context.Context, c CaseDetail) (outcome string, err error)

// Act applies an operator's action to case id, in one transaction that holds the case's
// row lock, and audits it in exception_actions with the actor and the address (remote) the
// action came from:
//   - resolve and dismiss need a note; replay runs replay (which produces the events).
//   - An action whose state the case is already in changes nothing and returns the case
//     (a double click, a retry after a timeout): every action is idempotent.
//   - Acting on a case closed another way is ErrCaseClosed.
//   - A refused replay is audited with its reason and returned as an ErrNotReplayable error;
//     a replay that failed (Kafka down) changes nothing and may be tried again.
func (e *Exceptions) Act(ctx context.Context, id int64, action, actor, remote, note string, at time.Time, replay Replay) (CaseDetail, error) {
	target, ok := map[string]string{ActReplay: seckill.CaseReplayed, ActResolve: seckill.CaseResolved, ActDismiss: seckill.CaseDismissed}[action]
	switch {
	case !ok:
		return CaseDetail{}, fmt.Errorf("unknown action %q", action)
	case action != ActReplay && note == "":
		return CaseDetail{}, fmt.Errorf("%s needs a note saying why", action)
	case utf8.RuneCountInString(note) > 1024: // the column's VARCHAR(1024) counts characters
		return CaseDetail{}, errors.New("note longer than 1024 characters")
	}
	var out CaseDetail
	var refused error
	err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row exceptionRow
		if err := first(tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id), &row); err != nil {
			return fmt.Errorf("exception case %d: %w", id, err)
		}
		switch {
		case row.State == target:
			d, err := e.detail(tx, row)
			out = d
			return err
		case row.State == seckill.CaseResolved || row.State == seckill.CaseDismissed,
			action == ActReplay && row.State != seckill.CaseOpen:
			return fmt.Errorf("case %d is %s by %s: %w", id, row.State, row.StateChangedBy, ErrCaseClosed)
		}
		outcome := row.State + " → " + target
		if action == ActReplay {
			if !seckill.CaseReplayable(row.Kind) {
				refused = fmt.Errorf("%s cases carry no event to replay; resolve or dismiss it: %w", row.Kind, ErrNotReplayable)
			} else {
				d, err := e.detail(tx, row)
				if err != nil {
					return err
				}
				o, err := replay(ctx, d)
				switch {
				case errors.Is(err, ErrNotReplayable):
					refused = err
				case err != nil:
					return fmt.Errorf("replay case %d: %w", id, err)
				default:
					outcome += ": " + o
				}
			}
			if refused != nil {
				outcome = "refused: " + refused.Error()
			}
		}
		if err := tx.Create(&actionRow{CaseID: id, At: at.UTC(), Actor: actor, RemoteAddr: truncate(remote, 64), Action: action, Note: note,
			Outcome: truncate(outcome, 1024)}).Error; err != nil {
			return fmt.Errorf("audit action on case %d: %w", id, err)
		}
		if refused == nil {
			t := at.UTC()
			row.State, row.StateChangedBy, row.StateChangedAt, row.StateNote = target, actor, &t, note
			if err := tx.Model(&exceptionRow{}).Where("id = ?", id).Updates(map[string]any{"state": target,
				"state_changed_by": actor, "state_changed_at": t, "state_note": note}).Error; err != nil {
				return fmt.Errorf("update case %d: %w", id, err)
			}
		}
		d, err := e.detail(tx, row)
		out = d
		return err
	})
	if err != nil {
		return CaseDetail{}, err
	}
	return out, refused
}
