-- Cancel PENDING jobs (ready, later, or under a reservation): FAILED, none left, claim cleared,
-- updated now, the cancel word after their status (base.ended_status).
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: updated_at (now), the cancel word, the limit less the word and a space, the cancel word,
--     then the ids.
UPDATE {table}
   SET state = 3,
       attempts_remaining = 0,
       claim_descriptor = NULL,
       updated_at = %s,
       custom_status = CASE WHEN COALESCE(custom_status, '') = '' THEN %s
                            ELSE CONCAT(SUBSTRING(custom_status, 1, %s), ' ', %s) END
 WHERE state = 0 AND local_id IN ({ids})
