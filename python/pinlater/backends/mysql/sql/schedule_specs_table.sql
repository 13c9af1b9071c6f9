-- Some schedules of one queue by name, with their specs: one part of due_schedules' second
-- UNION ALL, for the rows its page kept.
-- {table}: the queue's schedules table; {ids}: one %s per name. %s: the queue name (returned as
-- it is), then the names.
-- Returns: queue, name, spec, next_run, paused.
(SELECT %s, name, spec, next_run, paused FROM {table} WHERE name IN ({ids}))
