-- A body-filtered scan's batch, newest first (body_filtered.py), part one: the jobs of one state
-- at the position's run_after with smaller ids, in descending id order; part two is
-- filter_before.sql. As filter_ties.sql, the other way.
-- run_after comes as text (parsing a TIMESTAMP per row cost the client more than its body did)
-- and goes back as the next position; bodies come when at most a bound long (NULL past it: read
-- by id), so a batch holds a bounded amount of bodies.
-- {table}: the priority's jobs table.
-- %s: body bound, state, position run_after, position local_id, run_after from, run_after to,
--     limit.
-- Returns: as filter_ties.sql.
SELECT local_id, CAST(run_after AS CHAR), LENGTH(body), IF(LENGTH(body) <= %s, body, NULL)
  FROM {table}
 WHERE state = %s AND run_after = %s AND local_id < %s AND run_after >= %s AND run_after <= %s
 ORDER BY local_id DESC
 LIMIT %s
