-- The archive of ended sessions' orders (`reconciler archive`, docs/operators.md, Retention
-- and capacity). The orders table grows by every grab of every session and is the hot path's
-- table; rows of sessions ended long ago move here, one transaction per batch, with their
-- follow-up events and stock returns (both refer to orders by a foreign key). Every statement
-- is idempotent (a guard the runner checks in information_schema, or CREATE TABLE IF NOT
-- EXISTS), so a migration interrupted half-way can run again, on MySQL 8 as on MariaDB.

-- Set on a session×prize before its first order leaves orders. From then on the consumer's
-- transaction reads a request id in both tables (an archived request id is never persisted
-- twice when its grab event is replayed) and the per-user slots in both (the limit holds).
-- The hot path reads this column with the stock row it reads anyway: no query is added for
-- sessions that were never archived.
-- unless column session_stocks.archived_at
ALTER TABLE session_stocks ADD COLUMN archived_at DATETIME(6) NULL;

-- The same columns as orders, plus when the row was moved; ids are kept, so the events and
-- returns archived with an order still name it. No foreign keys: the stock rows stay, and
-- nothing writes here but the archive job. The unique request id and the slot index keep
-- what the consumer checks in orders checkable here too.
CREATE TABLE IF NOT EXISTS orders_archive (
  id                 BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  request_id         VARCHAR(128) NOT NULL,
  user_id            VARCHAR(64) NOT NULL,
  session_id         BIGINT UNSIGNED NOT NULL,
  prize_id           BIGINT UNSIGNED NOT NULL,
  status             VARCHAR(16) NOT NULL,
  reason             VARCHAR(32) NOT NULL DEFAULT '',
  per_user_limit     INT NOT NULL,
  slot               INT NULL,
  admitted_at        DATETIME(6) NOT NULL,
  created_at         DATETIME(6) NOT NULL,
  event_published_at DATETIME(6) NULL,
  paid_at            DATETIME(6) NULL,
  cancelled_at       DATETIME(6) NULL,
  archived_at        DATETIME(6) NOT NULL,
  UNIQUE KEY uq_order_archive_request (request_id),
  KEY ix_order_archive_slot (session_id, prize_id, user_id, slot),
  KEY ix_order_archive_stock (session_id, prize_id, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS order_events_archive (
  id           BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  event_id     VARCHAR(200) NOT NULL,
  order_id     BIGINT UNSIGNED NOT NULL,
  type         VARCHAR(32) NOT NULL,
  reason       VARCHAR(32) NOT NULL,
  occurred_at  DATETIME(6) NOT NULL,
  published_at DATETIME(6) NULL,
  UNIQUE KEY uq_order_event_archive (event_id),
  KEY ix_order_event_archive_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS stock_returns_archive (
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
  KEY ix_return_archive_stock (session_id, prize_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
