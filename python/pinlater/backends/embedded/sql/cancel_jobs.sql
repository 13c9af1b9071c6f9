-- Cancel jobs of one priority by id: a PENDING (or WAITING) one becomes FAILED with no attempt
-- left, claim (or reservation) cleared, updated now and ' cancelled' appended (base.ended_status);
-- an IN_PROGRESS one with attempts left keeps everything but its attempts_remaining, set to 0,
-- which marks it cancelled for its ack, claim timeout or checkpoint. Others are left alone.
-- The unary + keeps SQLite probing each id instead of scanning the queue's index.
-- Params: :queue, :priority, :ids (a JSON array of local ids), :status_limit, :now_ms.
-- Returns each changed job's id, new state, group (NULL: ungrouped) and whether it was waiting.
UPDATE jobs
   SET state = CASE WHEN state = 1 THEN 1 ELSE 3 END,
       attempts_remaining = 0,
       claim_descriptor = CASE WHEN state = 1 THEN claim_descriptor END,
       custom_status = CASE WHEN state = 1 THEN custom_status
                            WHEN custom_status = '' THEN 'cancelled'
                            ELSE substr(custom_status, 1, max(0, :status_limit - 10)) || ' cancelled' END,
       updated_at_ms = CASE WHEN state = 1 THEN updated_at_ms ELSE :now_ms END
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority
   AND (+state <= 0 OR (+state = 1 AND attempts_remaining > 0))
RETURNING local_id, state,
          (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id),
          (SELECT waiting FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
