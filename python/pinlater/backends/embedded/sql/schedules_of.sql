-- A queue's schedules, by name. Params: :queue. Returns: queue, name, spec, next_run_ms, paused.
SELECT queue, name, spec, next_run_ms, paused FROM schedules WHERE queue = :queue ORDER BY name
