-- Claim up to a limit of eligible PENDING jobs, oldest run_after first: one UPDATE ... LIMIT.
-- The claim is unique per call; select_claimed_jobs.sql then reads the claimed rows back.
-- The ORDER BY follows the (state, run_after) index (InnoDB appends local_id), so no sort.
-- Jobs under a live reservation of the dequeue broker are skipped (see reserve_jobs.sql); the
-- check reads the row the index walk lands on anyway, so the index still serves.
-- A job past its expiry (expire_at <= now, ms) is never handed out (expiry.py expires it).
-- {table}: the priority's jobs table.
-- %s: claim descriptor, updated_at (now), now (eligibility), now (ms, expiry), now (live reservations),
--     reservation prefix (twice), limit.
UPDATE {table}
   SET claim_descriptor = %s, state = 1, updated_at = %s
 WHERE state = 0 AND run_after <= %s
   AND (expire_at IS NULL OR expire_at > %s)
   AND NOT (claim_descriptor IS NOT NULL AND updated_at > %s
            AND LEFT(claim_descriptor, CHAR_LENGTH(%s)) = %s)
 ORDER BY run_after, local_id
 LIMIT %s
