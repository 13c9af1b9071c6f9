-- The bodies of a body-filtered delete's matches (body_filtered.py), read again and locked by
-- primary key alone (a range of the (state, run_after) index would lock the gaps around it
-- against enqueues and claims): a checkpoint may have given one a new body since the batch's
-- snapshot read it, so the delete matches what it deletes. The DELETE checks state and range.
-- {table}: the priority's jobs table; {ids}: the local ids.
-- %s: the ids.
-- Returns: local_id, body.
SELECT local_id, body
  FROM {table}
 WHERE local_id IN ({ids})
   FOR UPDATE
