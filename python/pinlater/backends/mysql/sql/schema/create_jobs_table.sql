-- One table per priority: the original's jobs_p{priority}, same columns, types and indexes.
-- {table}: `plq_{shard}_{queue}`.`jobs_p{priority}` from names.py.
-- Two changes: TIMESTAMP(3) instead of TIMESTAMP, so times keep their milliseconds, and the body
-- a MEDIUMBLOB (up to 16 MiB - 1, the default frame limit) instead of a BLOB (64 KiB - 1). Tables
-- the original created are read and written as they are: the server drops the milliseconds
-- there, and a body too long for their BLOB is refused (bodies.py names the ALTER TABLE).
-- state: 0 PENDING, 1 IN_PROGRESS, 2 SUCCEEDED, 3 FAILED.
-- expire_at (ours, #18): the job's expireAtTimestampMillis, ms since the epoch, NULL for none. Last
-- and nullable, so the original's statements (explicit column lists) never see it; a table made
-- without it gets it from add_expire_column.sql (expiry.py).
CREATE TABLE IF NOT EXISTS {table} (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  state TINYINT NOT NULL,
  claim_descriptor VARCHAR(200),
  attempts_allowed INT,
  attempts_remaining INT NOT NULL,
  custom_status VARCHAR(5000),
  updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  created_at TIMESTAMP(3) NOT NULL,
  run_after TIMESTAMP(3) NOT NULL,
  body MEDIUMBLOB NOT NULL,
  expire_at BIGINT NULL,
  PRIMARY KEY (local_id),
  INDEX (state, run_after),
  INDEX (claim_descriptor)
) ENGINE=InnoDB
