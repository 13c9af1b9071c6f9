-- Forget the group records of the jobs gc_finished_jobs.sql is about to delete (the same
-- subquery, run just before it, in the same transaction). Params: as gc_finished_jobs.sql.
DELETE FROM group_jobs
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = :state AND state >= 2
                       AND updated_at_ms < :finished_before_ms
                     ORDER BY updated_at_ms
                     LIMIT :limit)
