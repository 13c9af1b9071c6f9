-- A claim timeout with attempts left once the job's expiry has come expires it (FAILED, none
-- left, claim cleared, the expiry word appended: base.ended_status) instead of a retry.
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: the expiry word, the limit less the word and a space, the expiry word, updated_at (now),
--     now (ms), then the ids.
UPDATE {table}
   SET state = 3,
       claim_descriptor = NULL,
       custom_status = CASE WHEN COALESCE(custom_status, '') = '' THEN %s
                            ELSE CONCAT(SUBSTRING(custom_status, 1, %s), ' ', %s) END,
       updated_at = %s,
       attempts_remaining = 0
 WHERE state = 1 AND attempts_remaining > 1 AND expire_at <= %s AND local_id IN ({ids})
