-- Delete up to :limit jobs matching a filter. Params: as count_jobs.sql.
-- Returns each deleted job's group, state and id (groups.py accounts for grouped ones).
DELETE FROM jobs
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state IN (:state, :also_state)
                       AND run_after_ms > :run_after_gt AND run_after_ms <= :run_after_le
                     LIMIT :limit)
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state, local_id
