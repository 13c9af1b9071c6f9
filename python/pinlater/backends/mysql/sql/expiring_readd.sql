-- Index again, by expiry, jobs that just went back to PENDING (a retried failure ack, a claim
-- timeout, a checkpoint to PENDING), where they have an expiry: their row may have been
-- forgotten by expire_jobs while they were IN_PROGRESS. Plain jobs match nothing.
-- {side}: the queue's expiring table. {table}: the priority's jobs table. {ids}: one %s per id.
-- %s: the priority, then the ids.
INSERT INTO {side} (expire_at, priority, local_id)
SELECT expire_at, %s, local_id FROM {table}
 WHERE state = 0 AND expire_at IS NOT NULL AND local_id IN ({ids})
    ON DUPLICATE KEY UPDATE local_id = VALUES(local_id)
