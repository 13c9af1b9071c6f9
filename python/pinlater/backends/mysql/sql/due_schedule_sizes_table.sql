-- One queue's unpaused schedules whose next tick has come, earliest first, up to a limit, with
-- their specs' sizes and not the specs: one part of due_schedules' UNION ALL over the shard's
-- schedules tables, each a range of its `due` index (paused, next_run). The page is cut by the
-- sizes before a spec is read (schedule_specs_table.sql).
-- {table}: the queue's schedules table. %s: the queue name (returned as it is), now (ms), limit.
-- Returns: queue, name, next_run, the spec's bytes.
(SELECT %s, name, next_run, LENGTH(spec) FROM {table}
  WHERE paused = 0 AND next_run <= %s
  ORDER BY next_run
  LIMIT %s)
