-- The claim descriptors of these jobs where they are IN_PROGRESS: the caller keeps those whose
-- claim is the one it stamped (claims are unique per dequeue).
-- {table}: the priority's jobs table. {ids}: the local ids. %s: the ids.
SELECT local_id, claim_descriptor
  FROM {table}
 WHERE state = 1 AND local_id IN ({ids})
