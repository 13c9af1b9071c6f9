-- Delete up to :limit jobs matching a filter. Params: as count_jobs.sql.
DELETE FROM jobs
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = :state
                       AND run_after_ms > :run_after_gt AND run_after_ms <= :run_after_le
                     LIMIT :limit)
