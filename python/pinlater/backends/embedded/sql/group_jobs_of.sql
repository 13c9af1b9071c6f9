-- The groups of some jobs (jobs that just left their groups: acked SUCCEEDED), one row per
-- grouped job (the caller counts them per group); ungrouped jobs give no row. One rowid probe per
-- id, in the ids' order: no IN list built into a temporary index, no GROUP BY sort (together
-- about half the statement's cost). Params: :ids (a JSON array of distinct local ids).
-- Returns: group_key.
SELECT group_jobs.group_key
  FROM json_each(:ids) AS acked
 CROSS JOIN group_jobs
 WHERE group_jobs.local_id = acked.value
