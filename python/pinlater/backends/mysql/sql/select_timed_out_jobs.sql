-- The monitor's claim timeout, first statement: up to a limit of IN_PROGRESS jobs last updated
-- before a cutoff, locked, for resurrect_expire_jobs.sql and resurrect_timed_out_jobs.sql.
-- {table}: the priority's jobs table. %s: cutoff, limit. Returns: local_id.
SELECT local_id FROM {table}
 WHERE state = 1 AND updated_at < %s
 LIMIT %s
 FOR UPDATE
