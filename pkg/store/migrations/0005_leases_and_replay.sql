-- Single-actor leases with fencing numbers, in the system of record. The number grows with
-- every acquisition and lives here, not in Redis: a Redis data loss used to reset it to 1,
-- after which an old holder's number looked as new as anyone's. Expiry is judged by this
-- server's clock (NOW(6)) so holders' clocks never matter.
CREATE TABLE IF NOT EXISTS leases (
  name        VARCHAR(64) NOT NULL PRIMARY KEY,
  holder      CHAR(32) NOT NULL DEFAULT '',
  fence       BIGINT UNSIGNED NOT NULL DEFAULT 0,
  acquired_at DATETIME(6) NULL,
  expires_at  DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- How far the reconciler has replayed the compensation topic, per partition: every message
-- below next_offset was persisted (or dead-lettered). Written under the lease's fence, so a
-- replayer that lost its lease cannot move it.
CREATE TABLE IF NOT EXISTS replay_offsets (
  topic        VARCHAR(255) NOT NULL,
  partition_id INT NOT NULL,
  next_offset  BIGINT NOT NULL,
  fence        BIGINT UNSIGNED NOT NULL,
  updated_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (topic, partition_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
