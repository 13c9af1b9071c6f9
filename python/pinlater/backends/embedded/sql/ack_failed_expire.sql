-- Expire one claimed job whose retry would run at or after its expiry (a failure with attempts
-- left, now + :retry_delay_ms >= expire_at_ms): FAILED, no attempt left, claim cleared, ' expired'
-- after the status appended (base.ended_status). Run before ack_failed.sql on a queue with expiring
-- jobs (a row in expiries), which then finds the job no longer IN_PROGRESS.
-- Params: :queue, :priority, :local_id, :append, :status_limit, :retry_delay_ms, :now_ms.
-- Returns the job's group (NULL: ungrouped) when it expired: it left its group.
UPDATE OR FAIL jobs
   SET state = 3, attempts_remaining = 0, claim_descriptor = NULL,
       custom_status = CASE WHEN custom_status || :append = '' THEN 'expired'
                            ELSE substr(custom_status || :append, 1, max(0, :status_limit - 8)) || ' expired' END,
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
   AND attempts_remaining > 1 AND expire_at_ms <= :now_ms + :retry_delay_ms
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
