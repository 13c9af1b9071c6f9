-- The groups of the jobs an ack is about to mark SUCCEEDED (ack_succeeded_many.sql, run right
-- after with the same ids, in the same transaction): the grouped jobs among :ids that are
-- IN_PROGRESS in :queue at :priority, as that statement's WHERE picks them; one row per job (the
-- caller counts them per group, as having left their groups); ungrouped jobs give no row. One
-- rowid probe per id in jobs and one in group_jobs, in the ids' order: no IN list built into a
-- temporary index, no GROUP BY sort. Params: :queue, :priority, :ids (a JSON array of distinct
-- local ids). Returns: group_key.
SELECT group_jobs.group_key
  FROM json_each(:ids) AS acked
 CROSS JOIN jobs
 CROSS JOIN group_jobs
 WHERE jobs.local_id = acked.value
   AND +jobs.queue = :queue AND +jobs.priority = :priority AND +jobs.state = 1
   AND group_jobs.local_id = acked.value
