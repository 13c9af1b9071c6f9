-- The monitor's GC as gc_finished_jobs.sql, without its run_after bound: the once-an-hour call
-- per table (store.GC_FULL_SWEEP_SECONDS) that also reaches a finished job whose run_after is
-- past its end (a checkpoint without a move to PENDING sets run_after; a cancel or an expiry
-- ends a job that never ran). It may read every finished row of the table.
-- {table}: the priority's jobs table. %s: state, cutoff, limit.
DELETE FROM {table}
 WHERE state = %s AND updated_at < %s
 LIMIT %s
