-- Which of these jobs are IN_PROGRESS under this claim (the claim is unique per call).
-- {table}: the priority's jobs table. {ids}: the local ids. %s: claim descriptor, then the ids.
SELECT local_id
  FROM {table}
 WHERE claim_descriptor = %s AND state = 1 AND local_id IN ({ids})
