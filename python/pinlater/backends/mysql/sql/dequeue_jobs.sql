-- Claim up to a limit of eligible PENDING jobs, oldest run_after first: one UPDATE ... LIMIT.
-- The claim is unique per call; select_claimed_jobs.sql then reads the claimed rows back.
-- The ORDER BY follows the (state, run_after) index (InnoDB appends local_id), so no sort.
-- {table}: the priority's jobs table.
-- %s: claim descriptor, updated_at (now), now (eligibility), limit.
UPDATE {table}
   SET claim_descriptor = %s, state = 1, updated_at = %s
 WHERE state = 0 AND run_after <= %s
 ORDER BY run_after, local_id
 LIMIT %s
