-- One table per priority: the original's jobs_p{priority}, same columns, types and indexes.
-- {table}: `plq_{shard}_{queue}`.`jobs_p{priority}` from names.py.
-- The one change: TIMESTAMP(3) instead of TIMESTAMP, so times keep their milliseconds. Tables
-- the original created (second precision) are read and written as they are; the server drops
-- the milliseconds there.
-- state: 0 PENDING, 1 IN_PROGRESS, 2 SUCCEEDED, 3 FAILED.
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
  body BLOB NOT NULL,
  PRIMARY KEY (local_id),
  INDEX (state, run_after),
  INDEX (claim_descriptor)
) ENGINE=InnoDB
