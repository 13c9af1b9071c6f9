-- A queue's claim lock (#17, maxInProgress): one row that every capped claim of the queue on
-- this shard locks first (lock_claims.sql), so that two servers never both see room for the same
-- IN_PROGRESS slot. A table of ours beside the original's jobs tables, which the original server
-- never reads; made with the queue, or by the first capped claim of a queue made without it.
-- Claims of a queue without a cap never touch it.
-- {table}: `plq_{shard}_{queue}`.`claim_lock` from names.py.
CREATE TABLE IF NOT EXISTS {table} (
  id TINYINT UNSIGNED NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB
