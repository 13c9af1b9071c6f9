-- How many jobs of a queue have expired so far on this shard (#18, /metrics), kept across
-- restarts: one row (id 1). A table of ours beside the original's jobs tables (it goes with the
-- queue), made with the queue, or by expiry.migrate with the queue's expiring table.
-- {table}: `plq_{shard}_{queue}`.`expired_count` from names.py.
CREATE TABLE IF NOT EXISTS {table} (
  id TINYINT UNSIGNED NOT NULL,
  expired BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB
