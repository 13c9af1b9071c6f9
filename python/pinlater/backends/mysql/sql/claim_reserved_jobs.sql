-- Claim reserved jobs as dequeue_jobs.sql claims, only where the job is still PENDING under this
-- live reservation (see reserve_jobs.sql). select_claimed_ids.sql reads back which were claimed.
-- {table}: the priority's jobs table. {ids}: the local ids.
-- %s: claim descriptor, updated_at (now), reservation, now (live), then the ids.
UPDATE {table}
   SET claim_descriptor = %s, state = 1, updated_at = %s
 WHERE claim_descriptor = %s AND state = 0 AND updated_at > %s
   AND local_id IN ({ids})
