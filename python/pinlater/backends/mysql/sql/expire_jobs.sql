-- Expire PENDING jobs past their expiry (expiry.expire_jobs, given ids from expiring_due.sql):
-- FAILED, none left, claim cleared, updated now, the expiry word after their status
-- (base.ended_status).
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: updated_at (now), the expiry word, the limit less the word and a space, the expiry word,
--     now (ms), then the ids.
UPDATE {table}
   SET state = 3,
       attempts_remaining = 0,
       claim_descriptor = NULL,
       updated_at = %s,
       custom_status = CASE WHEN COALESCE(custom_status, '') = '' THEN %s
                            ELSE CONCAT(SUBSTRING(custom_status, 1, %s), ' ', %s) END
 WHERE state = 0 AND expire_at <= %s AND local_id IN ({ids})
