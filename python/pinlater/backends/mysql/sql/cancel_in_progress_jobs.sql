-- Cancel IN_PROGRESS jobs: no further attempt (attempts_remaining 0, which no other IN_PROGRESS
-- job has); nothing else changes, updated_at included (assigned itself, so its ON UPDATE
-- default does not fire and the claim timeout still counts from the claim).
-- {table}: the priority's jobs table. {ids}: one %s per local id. %s: the ids.
UPDATE {table}
   SET attempts_remaining = 0, updated_at = updated_at
 WHERE state = 1 AND attempts_remaining > 0 AND local_id IN ({ids})
