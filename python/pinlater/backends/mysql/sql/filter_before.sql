-- A body-filtered scan's batch, newest first (body_filtered.py), part two: the jobs of one state
-- before the position's run_after, down to the range's start, by (run_after, local_id) descending.
-- run_after comes as text (parsing a TIMESTAMP per row cost the client more than its body did)
-- and goes back as the next position; bodies come when at most a bound long (NULL past it: read
-- by id), so a batch holds a bounded amount of bodies.
-- {table}: the priority's jobs table.
-- %s: body bound, state, position run_after, run_after from, limit.
-- Returns: as filter_ties.sql.
SELECT local_id, CAST(run_after AS CHAR), LENGTH(body), IF(LENGTH(body) <= %s, body, NULL)
  FROM {table}
 WHERE state = %s AND run_after < %s AND run_after >= %s
 ORDER BY run_after DESC, local_id DESC
 LIMIT %s
