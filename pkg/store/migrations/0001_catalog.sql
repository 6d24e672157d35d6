-- Activities, their materialised sessions, prizes, per session×prize stock, orders and the
-- audit log. Each statement is idempotent (IF NOT EXISTS): DDL commits implicitly in MySQL,
-- so a migration interrupted half-way must be safe to run again.

CREATE TABLE IF NOT EXISTS activities (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name           VARCHAR(128) NOT NULL,
  window_start   DATETIME(3) NOT NULL,
  window_end     DATETIME(3) NOT NULL,
  interval_ms    BIGINT NOT NULL,
  session_ms     BIGINT NOT NULL,
  per_user_limit INT NOT NULL,
  status         VARCHAR(16) NOT NULL DEFAULT 'active',
  created_at     DATETIME(3) NOT NULL,
  CONSTRAINT ck_activity_window CHECK (window_end > window_start),
  CONSTRAINT ck_activity_interval CHECK (interval_ms > 0 AND session_ms > 0 AND session_ms <= interval_ms),
  CONSTRAINT ck_activity_limit CHECK (per_user_limit >= 1)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS prizes (
  id                BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  activity_id       BIGINT UNSIGNED NOT NULL,
  name              VARCHAR(128) NOT NULL,
  stock_per_session INT NOT NULL,
  UNIQUE KEY uq_prize_name (activity_id, name),
  CONSTRAINT fk_prize_activity FOREIGN KEY (activity_id) REFERENCES activities (id),
  CONSTRAINT ck_prize_stock CHECK (stock_per_session >= 0)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS sessions (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  activity_id BIGINT UNSIGNED NOT NULL,
  seq         INT NOT NULL,
  starts_at   DATETIME(3) NOT NULL,
  ends_at     DATETIME(3) NOT NULL,
  closed_at   DATETIME(3) NULL,
  UNIQUE KEY uq_session_seq (activity_id, seq),
  KEY ix_session_starts (starts_at),
  KEY ix_session_ends (ends_at),
  CONSTRAINT fk_session_activity FOREIGN KEY (activity_id) REFERENCES activities (id),
  CONSTRAINT ck_session_window CHECK (ends_at > starts_at)
) ENGINE=InnoDB;

-- The hot row. left_stock can never go below zero whatever a writer does (I1), and version
-- is bumped by every conditional update (optimistic locking).
CREATE TABLE IF NOT EXISTS session_stocks (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  session_id     BIGINT UNSIGNED NOT NULL,
  prize_id       BIGINT UNSIGNED NOT NULL,
  total          INT NOT NULL,
  left_stock     INT NOT NULL,
  version        BIGINT UNSIGNED NOT NULL DEFAULT 0,
  per_user_limit INT NOT NULL,
  updated_at     DATETIME(3) NOT NULL,
  UNIQUE KEY uq_stock (session_id, prize_id),
  UNIQUE KEY uq_stock_limit (session_id, prize_id, per_user_limit),
  CONSTRAINT fk_stock_session FOREIGN KEY (session_id) REFERENCES sessions (id),
  CONSTRAINT fk_stock_prize FOREIGN KEY (prize_id) REFERENCES prizes (id),
  CONSTRAINT ck_stock_left CHECK (left_stock >= 0),
  CONSTRAINT ck_stock_total CHECK (left_stock <= total),
  CONSTRAINT ck_stock_limit CHECK (per_user_limit >= 1)
) ENGINE=InnoDB;

-- One row per grab outcome. The per-user guard lives in the database (I2, "even if Redis
-- forgot"): a succeeded order takes a slot 1..per_user_limit, slots are unique per
-- user×session×prize, and per_user_limit must equal the stock row's (composite foreign key),
-- so no writer can store more succeeded orders for a user than the limit.
CREATE TABLE IF NOT EXISTS orders (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  request_id     VARCHAR(128) NOT NULL,
  user_id        VARCHAR(64) NOT NULL,
  session_id     BIGINT UNSIGNED NOT NULL,
  prize_id       BIGINT UNSIGNED NOT NULL,
  status         VARCHAR(16) NOT NULL,
  reason         VARCHAR(32) NOT NULL DEFAULT '',
  per_user_limit INT NOT NULL,
  slot           INT NULL,
  admitted_at    DATETIME(6) NOT NULL,
  created_at     DATETIME(6) NOT NULL,
  -- The orders table is also the transactional outbox of order events: NULL until the
  -- order's event is on the order topic (see 0002 and consumer/outbox.go).
  event_published_at DATETIME(6) NULL,
  UNIQUE KEY uq_order_request (request_id),
  UNIQUE KEY uq_order_user_slot (session_id, prize_id, user_id, slot),
  KEY ix_order_stock (session_id, prize_id, status),
  KEY ix_order_unpublished (event_published_at, id),
  CONSTRAINT fk_order_limit FOREIGN KEY (session_id, prize_id, per_user_limit)
    REFERENCES session_stocks (session_id, prize_id, per_user_limit),
  CONSTRAINT ck_order_outcome CHECK (
    (status = 'succeeded' AND slot BETWEEN 1 AND per_user_limit AND reason = '') OR
    (status = 'rejected' AND slot IS NULL AND reason <> ''))
) ENGINE=InnoDB;

-- Who changed stock, when, from what to what, and why (admin adjustments, reconciler fixes).
CREATE TABLE IF NOT EXISTS audit_log (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  at           DATETIME(6) NOT NULL,
  actor        VARCHAR(64) NOT NULL,
  action       VARCHAR(64) NOT NULL,
  session_id   BIGINT UNSIGNED NULL,
  prize_id     BIGINT UNSIGNED NULL,
  before_value BIGINT NULL,
  after_value  BIGINT NULL,
  detail       VARCHAR(1024) NOT NULL DEFAULT '',
  KEY ix_audit_stock (session_id, prize_id, at)
) ENGINE=InnoDB;
