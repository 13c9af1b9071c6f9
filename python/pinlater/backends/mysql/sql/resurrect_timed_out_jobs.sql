-- The monitor's claim timeout: IN_PROGRESS jobs last updated before a cutoff fail without a
-- retry delay, like ack_failed_jobs.sql (attempts_remaining is assigned last for the same
-- reason). Bounded by a LIMIT.
-- {table}: the priority's jobs table.
-- %s: run_after for retries (now), updated_at (now), cutoff, limit.
UPDATE {table}
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after = CASE WHEN attempts_remaining > 1 THEN %s ELSE run_after END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       updated_at = %s,
       attempts_remaining = GREATEST(attempts_remaining - 1, 0)
 WHERE state = 1 AND updated_at < %s
 LIMIT %s
