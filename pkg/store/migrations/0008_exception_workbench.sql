-- The exceptions workbench: what no job can settle alone, one case per kind×key, handed to a
-- person. Every statement is idempotent (a guard the runner checks in information_schema, or
-- CREATE TABLE IF NOT EXISTS), so a migration interrupted half-way can run again.

-- A case is keyed by its kind and a key of the kind's choosing (a request id, a dead
-- letter's source, a session×prize), and carries where it happened, the evidence to judge
-- it (JSON), and its state: open → replayed / resolved / dismissed, with who, when and why.
-- unless column exception_cases.case_key
ALTER TABLE exception_cases ADD COLUMN case_key VARCHAR(200) NOT NULL DEFAULT '' AFTER kind;
-- unless column exception_cases.session_id
ALTER TABLE exception_cases ADD COLUMN session_id BIGINT UNSIGNED NULL;
-- unless column exception_cases.prize_id
ALTER TABLE exception_cases ADD COLUMN prize_id BIGINT UNSIGNED NULL;
-- unless column exception_cases.user_id
ALTER TABLE exception_cases ADD COLUMN user_id VARCHAR(64) NOT NULL DEFAULT '';
-- unless column exception_cases.evidence
ALTER TABLE exception_cases ADD COLUMN evidence MEDIUMTEXT NULL;
-- unless column exception_cases.state
ALTER TABLE exception_cases ADD COLUMN state VARCHAR(16) NOT NULL DEFAULT 'open';
-- unless column exception_cases.state_changed_by
ALTER TABLE exception_cases ADD COLUMN state_changed_by VARCHAR(64) NOT NULL DEFAULT '';
-- unless column exception_cases.state_changed_at
ALTER TABLE exception_cases ADD COLUMN state_changed_at DATETIME(6) NULL;
-- unless column exception_cases.state_note
ALTER TABLE exception_cases ADD COLUMN state_note VARCHAR(1024) NOT NULL DEFAULT '';

-- The cases of 0007 were keyed by request id.
UPDATE exception_cases SET case_key = request_id WHERE case_key = '';

-- if index exception_cases.uq_exception_case
ALTER TABLE exception_cases DROP INDEX uq_exception_case;
-- unless index exception_cases.uq_exception_case_key
ALTER TABLE exception_cases ADD UNIQUE KEY uq_exception_case_key (kind, case_key);
-- unless index exception_cases.ix_exception_state
ALTER TABLE exception_cases ADD KEY ix_exception_state (state, last_seen_at);
-- unless index exception_cases.ix_exception_session
ALTER TABLE exception_cases ADD KEY ix_exception_session (session_id, last_seen_at);

-- unless constraint exception_cases.ck_exception_state
ALTER TABLE exception_cases ADD CONSTRAINT ck_exception_state
  CHECK (state IN ('open', 'replayed', 'resolved', 'dismissed'));

-- Every operator action on a case, refused ones included: the workbench's audit.
CREATE TABLE IF NOT EXISTS exception_actions (
  id       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  case_id  BIGINT UNSIGNED NOT NULL,
  at       DATETIME(6) NOT NULL,
  actor    VARCHAR(64) NOT NULL,
  action   VARCHAR(16) NOT NULL,
  note     VARCHAR(1024) NOT NULL DEFAULT '',
  outcome  VARCHAR(1024) NOT NULL DEFAULT '',
  KEY ix_exception_action_case (case_id, id),
  CONSTRAINT fk_exception_action_case FOREIGN KEY (case_id) REFERENCES exception_cases (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The reconciler's run reports (runs that held the lease), for the operator console. The
-- reconciler keeps the newest few thousand and deletes the rest as it writes.
CREATE TABLE IF NOT EXISTS reconcile_runs (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  started_at  DATETIME(6) NOT NULL,
  duration_ms BIGINT NOT NULL,
  fence       BIGINT NOT NULL,
  failed      TINYINT(1) NOT NULL,
  report      MEDIUMTEXT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
