-- The monitor's GC: delete up to a limit of SUCCEEDED or FAILED jobs last updated before a
-- cutoff. (The original compared run_after, which can be far from the finishing time.) The
-- run_after bound keeps the statement in the (state, run_after) index's range of rows that can
-- qualify: updated_at has no index, and without it the sweep's last call of each pass (the one
-- that finds fewer than its limit) read, and under REPEATABLE READ locked, every finished row of
-- the table. A job that ran to its end ran after its run_after; one whose run_after is later (a
-- checkpoint set it, or a cancel or an expiry ended a job not yet due) goes at the once-an-hour
-- call without the bound (gc_finished_jobs_all.sql).
-- {table}: the priority's jobs table. %s: state, cutoff, cutoff, limit.
DELETE FROM {table}
 WHERE state = %s AND run_after < %s AND updated_at < %s
 LIMIT %s
