-- A queue's index of PENDING jobs by expiry (#18): one row per job that may be PENDING with an
-- expiry, every priority, so expire_jobs walks the jobs due, soonest first, without an index on
-- the jobs tables (which every plain job would pay for). A table of ours beside the original's
-- jobs tables, which the original server never reads; made with the queue, or by
-- add_expire_column.sql's migration (expiry.py).
-- Every PENDING job with an expiry has its row (written by the enqueue, and again by whatever
-- puts such a job back to PENDING: a retried failure ack, a claim timeout, a checkpoint); a row
-- may outlive that (the job finished or was deleted): expire_jobs forgets it once due.
-- {table}: `plq_{shard}_{queue}`.`expiring` from names.py.
CREATE TABLE IF NOT EXISTS {table} (
  expire_at BIGINT NOT NULL,
  priority TINYINT UNSIGNED NOT NULL,
  local_id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (expire_at, priority, local_id)
) ENGINE=InnoDB
