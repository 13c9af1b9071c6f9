-- Which of these jobs are still PENDING under this live reservation (see reserve_jobs.sql): a
-- capped claim of reserved jobs with room for fewer than it was given claims the first of these.
-- {table}: the priority's jobs table. {ids}: one %s per job.
-- %s: reservation, now (live), then the ids.
-- Returns: local_id.
SELECT local_id
  FROM {table}
 WHERE claim_descriptor = %s AND state = 0 AND updated_at > %s
   AND local_id IN ({ids})
