-- Delete the jobs of a body-filtered delete's batch that matched, read again under lock
-- (lock_bodies_by_id.sql, body_filtered.py), each only if it is still of the filter's state and
-- run_after range.
-- {table}: the priority's jobs table; {ids}: the local ids.
-- %s: state, run_after from, run_after to, the ids.
DELETE FROM {table}
 WHERE state = %s AND run_after >= %s AND run_after <= %s AND local_id IN ({ids})
