-- Unpaid and cancelled orders give their stock back. Every statement is idempotent (a guard
-- the runner checks in information_schema, or CREATE TABLE IF NOT EXISTS), so a migration
-- interrupted half-way can run again, on MySQL 8 as on MariaDB.

-- Per activity: how long a succeeded order may stay unpaid (0: no timeout), and whether a
-- buyer whose order was cancelled may grab the prize again in the same session.
-- unless column activities.payment_timeout_ms
ALTER TABLE activities ADD COLUMN payment_timeout_ms BIGINT NOT NULL DEFAULT 0;
-- unless column activities.regrab_after_cancel
ALTER TABLE activities ADD COLUMN regrab_after_cancel TINYINT(1) NOT NULL DEFAULT 0;

-- An order's life after its creation: paid (downstream said so) or cancelled (downstream, or
-- the payment timeout), never both. No new index: these columns are written by conditional
-- UPDATEs of single rows found by request id, never by the batched INSERT of the hot path,
-- which leaves them NULL.
-- unless column orders.paid_at
ALTER TABLE orders ADD COLUMN paid_at DATETIME(6) NULL;
-- unless column orders.cancelled_at
ALTER TABLE orders ADD COLUMN cancelled_at DATETIME(6) NULL;

-- The state rule, in the database: a succeeded order holds a slot; a rejected one holds none
-- and is never paid; a cancelled one has a reason, its time, was never paid, and holds its
-- slot only in an activity that does not let the buyer grab again (it released it otherwise).
-- if constraint orders.ck_order_outcome
ALTER TABLE orders DROP CONSTRAINT ck_order_outcome;
-- unless constraint orders.ck_order_state
ALTER TABLE orders ADD CONSTRAINT ck_order_state CHECK (
  (status = 'succeeded' AND slot BETWEEN 1 AND per_user_limit AND reason = '' AND cancelled_at IS NULL) OR
  (status = 'rejected' AND slot IS NULL AND reason <> '' AND paid_at IS NULL AND cancelled_at IS NULL) OR
  (status = 'cancelled' AND (slot IS NULL OR slot BETWEEN 1 AND per_user_limit) AND reason <> ''
     AND paid_at IS NULL AND cancelled_at IS NOT NULL));

-- The outbox of the order events that follow an order's creation (order.cancelled,
-- order.refund_required). The creation event stays in orders (event_published_at): the hot
-- path writes no row here. event_id is the event's stable id ("order:<rid>:cancelled"),
-- unique, so a cancellation or a late payment processed twice writes one event. The relay
-- publishes a row only after its order's creation event is on the topic.
CREATE TABLE IF NOT EXISTS order_events (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id     VARCHAR(200) NOT NULL,
  order_id     BIGINT UNSIGNED NOT NULL,
  type         VARCHAR(32) NOT NULL,
  reason       VARCHAR(32) NOT NULL,
  occurred_at  DATETIME(6) NOT NULL,
  published_at DATETIME(6) NULL,
  UNIQUE KEY uq_order_event (event_id),
  KEY ix_order_event_unpublished (published_at, id),
  CONSTRAINT fk_order_event_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per cancelled order: its unit went back to left_stock in the cancelling
-- transaction. resale says whether the session was open then (the unit goes back into Redis
-- to be sold again; otherwise Redis only learns the outcome); redis_done_at is set once the
-- Redis step ran, or was found done (a replay, a rebuild). Rows with redis_done_at NULL are
-- the Redis steps still to make after a crash between the commit and the script, or while
-- Redis had lost the keys; the reconciler sweeps them.
CREATE TABLE IF NOT EXISTS stock_returns (
  order_id      BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  request_id    VARCHAR(128) NOT NULL,
  user_id       VARCHAR(64) NOT NULL,
  session_id    BIGINT UNSIGNED NOT NULL,
  prize_id      BIGINT UNSIGNED NOT NULL,
  reason        VARCHAR(32) NOT NULL,
  release_slot  TINYINT(1) NOT NULL,
  resale        TINYINT(1) NOT NULL,
  returned_at   DATETIME(6) NOT NULL,
  redis_done_at DATETIME(6) NULL,
  KEY ix_return_stock (session_id, prize_id),
  KEY ix_return_redis (redis_done_at, order_id),
  CONSTRAINT fk_return_order FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Reports the pipeline cannot apply (feedback for an unknown order, a cancellation after a
-- payment, ...), one row per kind×request id however often it is seen: a minimal case list
-- a later exception workbench can extend (owner, state, notes).
CREATE TABLE IF NOT EXISTS exception_cases (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  kind          VARCHAR(64) NOT NULL,
  request_id    VARCHAR(128) NOT NULL,
  detail        VARCHAR(1024) NOT NULL DEFAULT '',
  first_seen_at DATETIME(6) NOT NULL,
  last_seen_at  DATETIME(6) NOT NULL,
  seen          INT NOT NULL DEFAULT 1,
  UNIQUE KEY uq_exception_case (kind, request_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The final report counts cancellations and where their units went.
-- unless column session_reports.cancelled
ALTER TABLE session_reports ADD COLUMN cancelled INT NOT NULL DEFAULT 0;
-- unless column session_reports.returned_for_resale
ALTER TABLE session_reports ADD COLUMN returned_for_resale INT NOT NULL DEFAULT 0;
-- unless column session_reports.returned_after_end
ALTER TABLE session_reports ADD COLUMN returned_after_end INT NOT NULL DEFAULT 0;
