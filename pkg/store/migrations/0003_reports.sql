-- The reconciler's final report per session×prize, written once after the session ended.
CREATE TABLE IF NOT EXISTS session_reports (
  session_id      BIGINT UNSIGNED NOT NULL,
  prize_id        BIGINT UNSIGNED NOT NULL,
  total           INT NOT NULL,
  sold            INT NOT NULL,
  left_stock      INT NOT NULL,
  rejected        INT NOT NULL,
  drift_corrected INT NOT NULL,
  reported_at     DATETIME(6) NOT NULL,
  PRIMARY KEY (session_id, prize_id)
) ENGINE=InnoDB;
