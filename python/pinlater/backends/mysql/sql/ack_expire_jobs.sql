-- The first statement of a failure ack's group: IN_PROGRESS jobs with attempts left whose retry
-- would run at or after their expiry expire instead (FAILED, none left, claim cleared, the
-- expiry word after the appended status: base.ended_status). ack_failed_jobs.sql then fails the
-- others as usual. Jobs without an expiry never match (NULL <= x is not true).
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: status to append, the expiry word, status to append, the limit less the word and a space,
--     the expiry word, updated_at (now), the retry's run_after (ms), then the ids.
UPDATE {table}
   SET state = 3,
       claim_descriptor = NULL,
       custom_status = CASE
         WHEN CONCAT(COALESCE(custom_status, ''), %s) = '' THEN %s
         ELSE CONCAT(SUBSTRING(CONCAT(COALESCE(custom_status, ''), %s), 1, %s), ' ', %s) END,
       updated_at = %s,
       attempts_remaining = 0
 WHERE state = 1 AND attempts_remaining > 1 AND expire_at <= %s AND local_id IN ({ids})
