-- The monitor's claim timeout, first statement: up to a limit of IN_PROGRESS jobs last updated
-- before a cutoff, locked, for resurrect_expire_jobs.sql and resurrect_timed_out_jobs.sql.
-- {table}: the priority's jobs table. %s: cutoff, limit. Returns: local_id, attempts_remaining
-- (locked: the updates find them as read, which tells the retried from the failed).
SELECT local_id, attempts_remaining FROM {table}
 WHERE state = 1 AND updated_at < %s
 LIMIT %s
 FOR UPDATE
