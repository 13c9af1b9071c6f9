-- Jobs of one state in a run_after range, newest run_after first, without bodies.
-- {table}: the priority's jobs table.
-- %s: state, run_after from, run_after to (both inclusive), limit.
-- Returns: as lookup_jobs.sql without the body.
SELECT local_id, state, attempts_allowed, attempts_remaining, custom_status, created_at,
       run_after, updated_at, claim_descriptor, expire_at
  FROM {table}
 WHERE state = %s AND run_after >= %s AND run_after <= %s
 ORDER BY run_after DESC, local_id DESC
 LIMIT %s
