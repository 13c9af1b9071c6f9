-- The monitor's GC: delete up to a limit of SUCCEEDED or FAILED jobs last updated before a
-- cutoff. (The original compared run_after, which can be far from the finishing time.)
-- {table}: the priority's jobs table. %s: state, cutoff, limit.
DELETE FROM {table}
 WHERE state = %s AND updated_at < %s
 LIMIT %s
