-- Release live reservations held by one reservation: the jobs stay PENDING and are dequeuable at
-- once (claim cleared, updated now).
-- {table}: the priority's jobs table. {ids}: the local ids.
-- %s: updated_at (now), reservation, now (live), then the ids.
UPDATE {table}
   SET claim_descriptor = NULL, updated_at = %s
 WHERE claim_descriptor = %s AND state = 0 AND updated_at > %s
   AND local_id IN ({ids})
