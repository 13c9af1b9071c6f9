-- A page of scan_jobs.sql after a cursor (run_after, local_id) of the last page: the jobs of
-- that run_after with smaller ids, then those of earlier run_afters, in scan order. Two parts,
-- each a range of the (state, run_after) index (InnoDB appends local_id), so a page costs about
-- its limit in rows however deep it starts, even among many jobs of one run_after.
-- {table}: the priority's jobs table.
-- %s: state, cursor run_after, run_after from, run_after to, cursor local_id, limit;
--     state, run_after from, run_after to, cursor run_after, limit; limit.
-- Returns: as scan_jobs.sql.
(SELECT local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
        run_after, updated_at, claim_descriptor, expire_at
   FROM {table}
  WHERE state = %s AND run_after = %s AND run_after >= %s AND run_after <= %s AND local_id < %s
  ORDER BY local_id DESC
  LIMIT %s)
UNION ALL
(SELECT local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
        run_after, updated_at, claim_descriptor, expire_at
   FROM {table}
  WHERE state = %s AND run_after >= %s AND run_after <= %s AND run_after < %s
  ORDER BY run_after DESC, local_id DESC
  LIMIT %s)
ORDER BY run_after DESC, local_id DESC
LIMIT %s
