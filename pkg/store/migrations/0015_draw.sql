-- The fair sale's draw (docs/design.md, "The draw"): a prize may give its units by a draw
-- among the users who entered during an entry window at the session's open, instead of to
-- the first requests that reach Redis. The prize says which (admission) and how long its
-- window is; each of its session×prizes gets one draw record (the commitment, then the frozen
-- entry set, then the reveal) and one row per entrant (the entry, its place in the ranking).
-- Every statement is idempotent (a guard, or IF NOT EXISTS), on MySQL 8 as on MariaDB.

-- 'fcfs' (first come, first served: every prize before this migration) or 'draw'.
-- unless column prizes.admission
ALTER TABLE prizes ADD COLUMN admission VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'fcfs';
-- unless column prizes.entry_window_ms
ALTER TABLE prizes ADD COLUMN entry_window_ms BIGINT NOT NULL DEFAULT 0;
-- unless constraint prizes.ck_prize_admission
ALTER TABLE prizes ADD CONSTRAINT ck_prize_admission CHECK ((admission = 'fcfs' AND entry_window_ms = 0) OR (admission = 'draw' AND entry_window_ms > 0 AND buckets = 1));

-- One draw per session×prize of a draw prize, created when the session is preheated. The
-- seed stays in this row, unpublished, until the reveal: only its SHA-256 (commitment) is
-- public before. salt_key derives each entry's salt and is never published. phase moves
-- committed -> frozen -> drawn, each step by the reconciler holding the lease (fence: the number of the last holder that wrote the row). entries and
-- merkle_root are set by the freeze; cutoff (the places offered a unit so far, in rank
-- order) and skipped_places (places within the cutoff the stock gate refused, as a JSON
-- array) by the draw and the waitlist after it. The optional beacon: a future round of a
-- public randomness beacon named at the commitment, whose signature the operator supplies
-- after the window closed; its value is mixed into the ranking key.
CREATE TABLE IF NOT EXISTS draws (
  session_id        BIGINT UNSIGNED NOT NULL,
  prize_id          BIGINT UNSIGNED NOT NULL,
  phase             VARCHAR(12) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  seed              BINARY(32) NOT NULL,
  salt_key          BINARY(32) NOT NULL,
  commitment        CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  entry_window_start DATETIME(3) NOT NULL,
  entry_window_end  DATETIME(3) NOT NULL,
  beacon_scheme     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  beacon_public_key VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NULL,
  beacon_round      BIGINT UNSIGNED NULL,
  beacon_signature  VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NULL,
  entries           INT NOT NULL DEFAULT 0,
  merkle_root       CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  cutoff            INT NOT NULL DEFAULT 0,
  skipped_places    TEXT CHARACTER SET ascii COLLATE ascii_bin NULL,
  fence             BIGINT NOT NULL DEFAULT 0,
  created_at        DATETIME(3) NOT NULL,
  frozen_at         DATETIME(3) NULL,
  drawn_at          DATETIME(3) NULL,
  PRIMARY KEY (session_id, prize_id),
  KEY ix_draw_phase (phase, entry_window_end),
  CONSTRAINT fk_draw_stock FOREIGN KEY (session_id, prize_id) REFERENCES session_stocks (session_id, prize_id),
  CONSTRAINT ck_draw_phase CHECK (phase IN ('committed', 'frozen', 'drawn')),
  CONSTRAINT ck_draw_cutoff CHECK (cutoff >= 0 AND cutoff <= entries),
  CONSTRAINT ck_draw_window CHECK (entry_window_end > entry_window_start)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per entrant of a draw, written by the freeze from Redis's entry set. salt hides the
-- entry in the public proofs of others (docs/design.md); leaf_index is its place in the
-- Merkle tree. place (1-based, in rank order) and ranking_value are set by the draw; state
-- says where the entrant is: entered, won (a unit was reserved, the grab goes on as an
-- order), skipped (the stock gate refused it: the per-user limit), waitlisted.
CREATE TABLE IF NOT EXISTS draw_entries (
  session_id    BIGINT UNSIGNED NOT NULL,
  prize_id      BIGINT UNSIGNED NOT NULL,
  user_id       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  salt          BINARY(16) NOT NULL,
  entered_at    DATETIME(3) NOT NULL,
  early         INT NOT NULL DEFAULT 0,
  leaf_index    INT NULL,
  place         INT NULL,
  ranking_value BINARY(32) NULL,
  state         VARCHAR(12) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'entered',
  PRIMARY KEY (session_id, prize_id, user_id),
  UNIQUE KEY uq_draw_place (session_id, prize_id, place),
  CONSTRAINT fk_draw_entry_draw FOREIGN KEY (session_id, prize_id) REFERENCES draws (session_id, prize_id),
  CONSTRAINT ck_draw_entry_state CHECK (state IN ('entered', 'won', 'skipped', 'waitlisted'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
