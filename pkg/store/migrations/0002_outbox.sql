-- Order events for downstream systems, written in the same transaction as the orders (the
-- transactional outbox) and relayed to the order topic by the consumer.

CREATE TABLE IF NOT EXISTS order_outbox (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id     VARCHAR(160) NOT NULL,
  order_id     BIGINT UNSIGNED NOT NULL,
  msg_key      VARCHAR(160) NOT NULL,
  payload      TEXT NOT NULL,
  created_at   DATETIME(6) NOT NULL,
  published_at DATETIME(6) NULL,
  UNIQUE KEY uq_outbox_event (event_id),
  KEY ix_outbox_pending (published_at, id)
) ENGINE=InnoDB;

-- How far the relay has matched the order topic against the outbox, per partition: every
-- message below next_offset has its outbox row marked published. After a crash or an
-- ambiguous produce error the relay reads from here to the end of the partition and marks
-- what is already on the topic instead of publishing it twice.
CREATE TABLE IF NOT EXISTS outbox_checkpoints (
  topic        VARCHAR(255) NOT NULL,
  partition_id INT NOT NULL,
  next_offset  BIGINT NOT NULL,
  PRIMARY KEY (topic, partition_id)
) ENGINE=InnoDB;
