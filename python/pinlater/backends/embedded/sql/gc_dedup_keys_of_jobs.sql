-- Forget the records without a window (held_until_ms 0: schema.sql, dedup_keys_windowed) of the
-- jobs gc_finished_jobs.sql is about to delete (the same subquery, run just before it, in the
-- same transaction), one probe of dedup_keys_by_job per job. A record that a later job took
-- names that job, and stays. Params: as gc_finished_jobs.sql.
DELETE FROM dedup_keys
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = :state AND state >= 2
                       AND updated_at_ms < :finished_before_ms
                     ORDER BY updated_at_ms
                     LIMIT :limit)
   AND held_until_ms = 0 AND +queue = :queue
