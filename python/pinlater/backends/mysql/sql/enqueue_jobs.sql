-- Insert jobs of one priority as PENDING, all in ONE statement.
-- {table}: the priority's jobs table. {rows}: one (%s x 8) group per job, with, in order:
--   state (0), attempts_allowed, attempts_remaining, custom_status (already cut to the limit),
--   created_at, updated_at, run_after, body.
-- Ids: the statement's LAST_INSERT_ID() is the first row's id; with innodb_autoinc_lock_mode
-- 0 or 1 the rows get consecutive ids (step auto_increment_increment) in VALUES order.
INSERT INTO {table}
  (state, attempts_allowed, attempts_remaining, custom_status, created_at, updated_at, run_after, body)
VALUES {rows}
