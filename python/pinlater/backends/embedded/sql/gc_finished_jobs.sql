-- Delete up to :limit jobs in a final :state last updated before :finished_before_ms.
-- `state >= 2` lets SQLite use the partial index of finished jobs (jobs_finished_by_updated_at).
-- Params: :queue, :priority, :state, :finished_before_ms, :limit. Returns: the deleted jobs' local
-- ids (their group and key records go next: store.py).
DELETE FROM jobs
 WHERE local_id IN (SELECT local_id FROM jobs
                     WHERE queue = :queue AND priority = :priority AND state = :state AND state >= 2
                       AND updated_at_ms < :finished_before_ms
                     ORDER BY updated_at_ms
                     LIMIT :limit)
RETURNING local_id
