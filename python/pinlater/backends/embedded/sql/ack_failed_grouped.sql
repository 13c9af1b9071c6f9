-- ack_failed.sql for a queue with ordered groups (a row in groups), returning what they need.
-- Fail one claimed job: back to PENDING after :retry_delay_ms with one attempt less while more
-- than one attempt remains, else FAILED with none. A job that is not IN_PROGRESS is left alone.
-- A cancelled job (attempts_remaining 0: cancel_jobs.sql) ends FAILED with ' cancelled' after the
-- status appended (base.ended_status). On a queue with expiring jobs ack_failed_expire.sql runs first.
-- Returns the job's group and new state: a grouped job that became FAILED left its group.
-- Params: :queue, :priority, :local_id, :append, :status_limit, :retry_delay_ms, :now_ms.
UPDATE OR FAIL jobs
   SET state = CASE WHEN attempts_remaining > 1 THEN 0 ELSE 3 END,
       run_after_ms = CASE WHEN attempts_remaining > 1 THEN :now_ms + :retry_delay_ms ELSE run_after_ms END,
       claim_descriptor = CASE WHEN attempts_remaining > 1 THEN NULL ELSE claim_descriptor END,
       attempts_remaining = CASE WHEN attempts_remaining > 1 THEN attempts_remaining - 1 ELSE 0 END,
       custom_status = CASE WHEN attempts_remaining > 0 THEN substr(custom_status || :append, 1, :status_limit)
                            WHEN custom_status || :append = '' THEN 'cancelled'
                            ELSE substr(custom_status || :append, 1, max(0, :status_limit - 10)) || ' cancelled' END,
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state
