-- Reserve up to a limit of eligible PENDING jobs for the dequeue broker: the jobs
-- dequeue_jobs.sql would claim, left PENDING with attempts unchanged. A reserved job has
-- claim_descriptor = the reservation (starting with the reservation prefix) and updated_at = the
-- reservation's expiry; it is live while updated_at > now. A lapsed one is ignored (and
-- overwritten by the next claim or reservation). select_reserved_jobs.sql reads them back.
-- {table}: the priority's jobs table.
-- Jobs that expire before the hold's end are skipped (see ShardStore.reserve_jobs).
-- %s: reservation, hold's end, now (eligibility), hold's end (ms, expiry), now (live reservations),
--     reservation prefix (twice), limit.
UPDATE {table}
   SET claim_descriptor = %s, updated_at = %s
 WHERE state = 0 AND run_after <= %s
   AND (expire_at IS NULL OR expire_at > %s)
   AND NOT (claim_descriptor IS NOT NULL AND updated_at > %s
            AND LEFT(claim_descriptor, CHAR_LENGTH(%s)) = %s)
 ORDER BY run_after, local_id
 LIMIT %s
