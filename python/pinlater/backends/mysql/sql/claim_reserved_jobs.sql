-- Claim reserved jobs as dequeue_jobs.sql claims, only where the job is still PENDING under this
-- live reservation (see reserve_jobs.sql). Each job gets its own claim descriptor (one call
-- serves many workers' dequeues): ELT(FIELD(local_id, ids...), claims...) picks the claim at
-- the job's place in the list. select_claimed_ids.sql reads back which were claimed.
-- {table}: the priority's jobs table. {ids}: one %s per job (appears twice, plus the claims).
-- A job past its expiry is not claimed (it lapses as a reservation does).
-- %s: the ids, then the claims in the same order, updated_at (now), reservation, now (live),
-- now (ms, expiry), then the ids again.
UPDATE {table}
   SET claim_descriptor = ELT(FIELD(local_id, {ids}), {ids}), state = 1, updated_at = %s
 WHERE claim_descriptor = %s AND state = 0 AND updated_at > %s
   AND (expire_at IS NULL OR expire_at > %s)
   AND local_id IN ({ids})
