-- enqueue_jobs.sql for servers where ids of a multi-row INSERT may not be consecutive
-- (innodb_autoinc_lock_mode = 2): MariaDB 10.5+ returns each row's id, in VALUES order.
-- {table}, {rows}: as in enqueue_jobs.sql. Returns: local_id per row.
INSERT INTO {table}
  (state, attempts_allowed, attempts_remaining, custom_status, created_at, updated_at, run_after, body)
VALUES {rows}
RETURNING local_id
