-- Order events for downstream systems. The orders table is its own transactional outbox
-- (orders.event_published_at, in 0001): an order row and "its event is not published yet"
-- are written in the same INSERT, and the consumer's relay publishes rows whose stamp is
-- NULL, then stamps them. A separate outbox table doubled the rows, indexes and bytes of
-- every persistence transaction, the hot path; the event is fully derived from the order.

-- How far the relay has matched the order topic against the orders, per partition: every
-- message below next_offset has its order stamped published. After a crash or an ambiguous
-- produce error the relay reads from here to the end of the partition and stamps what is
-- already on the topic instead of publishing it twice.
CREATE TABLE IF NOT EXISTS outbox_checkpoints (
  topic        VARCHAR(255) NOT NULL,
  partition_id INT NOT NULL,
  next_offset  BIGINT NOT NULL,
  PRIMARY KEY (topic, partition_id)
) ENGINE=InnoDB;
