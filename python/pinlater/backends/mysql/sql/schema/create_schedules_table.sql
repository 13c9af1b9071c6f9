-- A queue's schedules (#18), by name: spec is opaque text of schedules.py (UTF-8); next_run the
-- next tick, ms since the epoch; paused ones are never due. The `due` index serves
-- due_schedule_sizes_table.sql (unpaused, next_run <= now, earliest first). A table of ours beside the
-- original's jobs tables (inside the queue's database, so the grants the original needs cover
-- it, and it goes with the queue), made by the queue's first put_schedule.
-- name: the schedule's UTF-8 bytes, binary, so compared byte for byte ('a' is not 'a ').
-- {table}: `plq_{shard}_{queue}`.`schedules` from names.py.
CREATE TABLE IF NOT EXISTS {table} (
  name VARBINARY(1024) NOT NULL,
  spec MEDIUMBLOB NOT NULL,
  next_run BIGINT NOT NULL,
  paused TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (name),
  INDEX due (paused, next_run)
) ENGINE=InnoDB
