-- The bodies of some jobs of one priority, by local id (a body filter's long bodies: body_filtered.py).
-- {table}: the priority's jobs table; {ids}: the local ids.
-- Returns: local_id, body (a job gone since it was listed has no row).
SELECT local_id, body FROM {table} WHERE local_id IN ({ids})
