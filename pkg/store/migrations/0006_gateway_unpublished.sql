-- Admitted grabs a gateway holds whose events Kafka has not acknowledged yet (a produce in
-- flight, or queued in the gateway's in-memory relay), per session×prize, reported by every
-- gateway about once a second with a heartbeat. After Redis loses a prize's keys these grabs
-- exist nowhere else: no reservation (Redis lost it), no event (not on Kafka yet), no order.
-- The reconciler rebuilds the prize's keys only once every live gateway reported, after the
-- keys were found missing, that it holds none for the prize; otherwise the rebuilt stock
-- would count those units as unsold and hand them out again.
CREATE TABLE IF NOT EXISTS gateway_heartbeats (
  gateway  VARCHAR(128) NOT NULL PRIMARY KEY,
  beat_at  DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS gateway_unpublished (
  gateway    VARCHAR(128) NOT NULL,
  session_id BIGINT UNSIGNED NOT NULL,
  prize_id   BIGINT UNSIGNED NOT NULL,
  pending    INT NOT NULL,
  PRIMARY KEY (gateway, session_id, prize_id),
  KEY ix_unpublished_prize (session_id, prize_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
