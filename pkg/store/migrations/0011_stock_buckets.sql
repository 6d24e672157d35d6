-- Stock buckets (docs/buckets.md): a session×prize's stock split into N parts, each with its
-- own Redis slot, grab partition and MySQL row, and the journal of the units the reconciler
-- moves between them. N = 1 (every default below) stores nothing new: no stock_buckets row,
-- no journal entry, orders.bucket 0. Every statement is idempotent (a guard the runner checks
-- in information_schema, or CREATE TABLE IF NOT EXISTS), on MySQL 8 as on MariaDB.

-- How many buckets the operator wants for the prize's sessions (1: none).
-- unless column prizes.buckets
ALTER TABLE prizes ADD COLUMN buckets INT NOT NULL DEFAULT 1;
-- unless constraint prizes.ck_prize_buckets
ALTER TABLE prizes ADD CONSTRAINT ck_prize_buckets CHECK (buckets >= 1);

-- How many buckets this session×prize has, fixed once its stock rows exist: every user's
-- home bucket depends on it. Bucket 0 is this row itself.
-- unless column session_stocks.buckets
ALTER TABLE session_stocks ADD COLUMN buckets INT NOT NULL DEFAULT 1;
-- unless constraint session_stocks.ck_stock_buckets
ALTER TABLE session_stocks ADD CONSTRAINT ck_stock_buckets CHECK (buckets >= 1);

-- Buckets 1..N-1 of a session×prize, with the columns the hot path writes and the same
-- checks as session_stocks (left never below zero, never above total). The per-user limit is
-- prize-wide and stays on the session_stocks row, which orders refer to.
CREATE TABLE IF NOT EXISTS stock_buckets (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  session_id  BIGINT UNSIGNED NOT NULL,
  prize_id    BIGINT UNSIGNED NOT NULL,
  bucket      INT NOT NULL,
  total       INT NOT NULL,
  left_stock  INT NOT NULL,
  version     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  updated_at  DATETIME(3) NOT NULL,
  UNIQUE KEY uq_stock_bucket (session_id, prize_id, bucket),
  CONSTRAINT fk_stock_bucket_stock FOREIGN KEY (session_id, prize_id) REFERENCES session_stocks (session_id, prize_id),
  CONSTRAINT ck_stock_bucket_no CHECK (bucket >= 1),
  CONSTRAINT ck_stock_bucket_left CHECK (left_stock >= 0),
  CONSTRAINT ck_stock_bucket_total CHECK (left_stock <= total)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The bucket an order's unit came from (0 for a prize without buckets): a cancellation gives
-- the unit back there.
-- unless column orders.bucket
ALTER TABLE orders ADD COLUMN bucket INT NOT NULL DEFAULT 0;
-- unless column orders_archive.bucket
ALTER TABLE orders_archive ADD COLUMN bucket INT NOT NULL DEFAULT 0;

-- The journal of transfers: units moved from one bucket of a session×prize to another, by
-- the reconciler holding the lease, in the order planned -> moved -> done (or planned ->
-- cancelled when nothing was taken). requested is what the plan asked for; taken what Redis's
-- source bucket gave up (step 2, recorded at step 3); units what moved in MySQL (at most
-- taken: less only when Redis held units MySQL did not, see docs/buckets.md). fence is the
-- lease's fencing number of the last writer.
CREATE TABLE IF NOT EXISTS bucket_transfers (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  session_id  BIGINT UNSIGNED NOT NULL,
  prize_id    BIGINT UNSIGNED NOT NULL,
  from_bucket INT NOT NULL,
  to_bucket   INT NOT NULL,
  requested   INT NOT NULL,
  taken       INT NULL,
  units       INT NULL,
  state       VARCHAR(16) NOT NULL DEFAULT 'planned',
  fence       BIGINT NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  updated_at  DATETIME(6) NOT NULL,
  KEY ix_bucket_transfer_open (state, id),
  KEY ix_bucket_transfer_stock (session_id, prize_id, state),
  CONSTRAINT fk_bucket_transfer_stock FOREIGN KEY (session_id, prize_id) REFERENCES session_stocks (session_id, prize_id),
  CONSTRAINT ck_bucket_transfer_buckets CHECK (from_bucket >= 0 AND to_bucket >= 0 AND from_bucket <> to_bucket),
  CONSTRAINT ck_bucket_transfer_units CHECK (requested >= 1 AND taken >= 0 AND units >= 0 AND units <= taken),
  CONSTRAINT ck_bucket_transfer_state CHECK (
    (state = 'planned' AND taken IS NULL AND units IS NULL) OR
    (state IN ('moved', 'done') AND taken IS NOT NULL AND units IS NOT NULL) OR
    (state = 'cancelled' AND units IS NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
