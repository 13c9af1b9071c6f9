-- A body filter's batch, oldest first (body_filtered.py), part one: the jobs of one state at the
-- position's run_after with larger ids (ties split by the last batch), in id order; part two is
-- filter_after.sql. Each part is one range of the (state, run_after) index (InnoDB appends
-- local_id), so a batch costs about its limit in rows however far the walk has gone.
-- run_after comes as text (parsing a TIMESTAMP per row cost the client more than its body did)
-- and goes back as the next position; bodies come when at most a bound long (NULL past it: read
-- by id), so a batch holds a bounded amount of bodies.
-- {table}: the priority's jobs table.
-- %s: body bound, state, position run_after, position local_id, run_after from, run_after to,
--     limit.
-- Returns: local_id, run_after (text), body length, body or NULL.
SELECT local_id, CAST(run_after AS CHAR), LENGTH(body), IF(LENGTH(body) <= %s, body, NULL)
  FROM {table}
 WHERE state = %s AND run_after = %s AND local_id > %s AND run_after >= %s AND run_after <= %s
 ORDER BY local_id
 LIMIT %s
