-- Up to :limit unpaused schedules of every queue whose next tick is at or before :now_ms, earliest
-- first, along the partial index schedules_due. Params: :now_ms, :limit.
-- Returns: queue, name, spec, next_run_ms, paused.
SELECT queue, name, spec, next_run_ms, paused FROM schedules INDEXED BY schedules_due
 WHERE paused = 0 AND next_run_ms <= :now_ms
 ORDER BY next_run_ms
 LIMIT :limit
