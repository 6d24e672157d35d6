-- Identifiers compare byte for byte. MySQL and MariaDB default to case-insensitive
-- collations (latin1_swedish_ci, utf8mb4_general_ci, ...), under which the unique keys on
-- orders.request_id and (session, prize, user, slot) treat "abc" and "ABC" as one: two users
-- whose Idempotency-Keys differ only in case, or users "Bob" and "bob", both admitted by Redis
-- (which compares bytes), would collide on INSERT and send a whole batch to compensation.
-- The schema pins its own character set and collation so it never depends on a server-wide
-- setting; `gateway migrate` verifies every text column after migrating.
ALTER TABLE activities CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE prizes CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE sessions CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE session_stocks CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE orders CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE audit_log CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE outbox_checkpoints CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
ALTER TABLE session_reports CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
