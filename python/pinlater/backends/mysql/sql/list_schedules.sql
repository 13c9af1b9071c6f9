-- One queue's schedules, by name.
-- {table}: the queue's schedules table.
-- Returns: name, spec, next_run, paused.
SELECT name, spec, next_run, paused FROM {table} ORDER BY name
