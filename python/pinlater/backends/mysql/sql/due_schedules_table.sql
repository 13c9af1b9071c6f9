-- One queue's unpaused schedules whose next tick has come, earliest first, up to a limit: one
-- part of due_schedules' UNION ALL over the shard's schedules tables, each a range of its `due`
-- index (paused, next_run).
-- {table}: the queue's schedules table. %s: the queue name (returned as it is), now (ms), limit.
-- Returns: queue, name, spec, next_run, paused.
(SELECT %s, name, spec, next_run, paused FROM {table}
  WHERE paused = 0 AND next_run <= %s
  ORDER BY next_run
  LIMIT %s)
