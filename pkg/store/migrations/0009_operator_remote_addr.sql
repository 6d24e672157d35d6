-- Operators sign in with credentials of their own, and every audited action records the
-- address it came from beside the credential's name. Plain MySQL 8 / MariaDB DDL (no
-- IF NOT EXISTS on ALTER, which MySQL 8 lacks): the migrator records the version after both
-- statements succeeded, so it runs once; should the second fail after the first committed
-- (DDL commits by itself), drop exception_actions.remote_addr before running it again. Rows
-- written before keep '' (address unknown).
ALTER TABLE exception_actions
  ADD COLUMN remote_addr VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' AFTER actor;

-- The session audit (closed sessions, stock adjustments); the automation's rows keep ''.
ALTER TABLE audit_log
  ADD COLUMN remote_addr VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' AFTER actor;
