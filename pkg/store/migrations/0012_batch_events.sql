-- Order events published from memory (docs/design.md, "How order events reach the topic").
-- The consumer publishes a committed batch's creation events right after the commit and
-- records its progress once per batch, in order_event_progress, instead of stamping every
-- order. An order it persisted carries the grab partition it came from and the sequence
-- number of the batch that inserted it; its event is published when grab_seq is below its
-- partition's next_seq (or when event_published_at is set, as for every other order).
-- Orders written before this migration, and those of the other write paths (compensation
-- replay, workbench replays), keep grab_partition NULL and the stamp-and-relay path.

-- unless column orders.grab_partition
ALTER TABLE orders ADD COLUMN grab_partition INT NULL;

-- unless column orders.grab_seq
ALTER TABLE orders ADD COLUMN grab_seq BIGINT NULL;

-- Recovery reads a partition's orders past its progress on this index.
-- unless index orders.ix_order_grab
CREATE INDEX ix_order_grab ON orders (grab_partition, grab_seq);

-- The relay reads the stamp path's pending orders (event_published_at IS NULL AND
-- grab_partition IS NULL) in id order; ix_order_unpublished (event_published_at, id) would
-- walk every batch-path order, whose stamp stays NULL, to find them.
-- unless index orders.ix_order_relay
CREATE INDEX ix_order_relay ON orders (event_published_at, grab_partition, id);

-- if index orders.ix_order_unpublished
DROP INDEX ix_order_unpublished ON orders;

-- One row per grab partition. next_seq: every order of this partition with a lower grab_seq
-- has its creation event on the order topic. epoch: bumped by every consumer that takes the
-- partition's named lock; a persistence transaction reads it with a shared lock and, when
-- it moved on (its writer lost the lock), stores its orders on the stamp path instead.
-- scan_from: order-topic offsets (JSON, partition to offset) at or below which no event of
-- an order past next_seq lies, where recovery reads the topic from.
CREATE TABLE IF NOT EXISTS order_event_progress (
  grab_partition INT NOT NULL PRIMARY KEY,
  epoch          BIGINT NOT NULL,
  next_seq       BIGINT NOT NULL,
  scan_from      VARCHAR(4096) NOT NULL,
  updated_at     DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
