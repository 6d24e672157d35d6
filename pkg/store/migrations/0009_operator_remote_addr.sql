-- Operators sign in with credentials of their own, and every audited action records the
-- address it came from beside the credential's name; rows written before keep '' (address
-- unknown). Each ALTER carries the guard the runner checks in information_schema (MySQL 8
-- lacks MariaDB's conditional ALTER clauses), so a run interrupted half-way can run again.

-- The exceptions workbench's actions.
-- unless column exception_actions.remote_addr
ALTER TABLE exception_actions
  ADD COLUMN remote_addr VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' AFTER actor;

-- The session audit (closed sessions, stock adjustments); the automation's rows keep ''.
-- unless column audit_log.remote_addr
ALTER TABLE audit_log
  ADD COLUMN remote_addr VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' AFTER actor;
