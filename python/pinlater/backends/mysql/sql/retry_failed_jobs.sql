-- Move up to a limit of FAILED jobs back to PENDING with the given attempts remaining, their
-- expiry cleared (an operator who puts a job back wants it run).
-- {table}: the priority's jobs table.
-- %s: attempts remaining, run_after, updated_at (now), limit.
UPDATE {table}
   SET state = 0, attempts_remaining = %s, run_after = %s, updated_at = %s, claim_descriptor = NULL,
       expire_at = NULL
 WHERE state = 3
 LIMIT %s
