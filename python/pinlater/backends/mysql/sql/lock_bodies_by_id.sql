-- The bodies of a body-filtered delete's matches (body_filtered.py), read again and locked while
-- they are of the filter's state and run_after range: a checkpoint may have given one a new body
-- since the batch's snapshot read it, so the delete matches what it deletes.
-- {table}: the priority's jobs table; {ids}: the local ids.
-- %s: state, run_after from, run_after to, the ids.
-- Returns: local_id, body.
SELECT local_id, body
  FROM {table}
 WHERE state = %s AND run_after >= %s AND run_after <= %s AND local_id IN ({ids})
   FOR UPDATE
