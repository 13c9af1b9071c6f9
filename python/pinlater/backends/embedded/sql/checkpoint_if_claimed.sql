-- Checkpoint one job, only while it is IN_PROGRESS under a claim containing :source (the
-- original's `claim_descriptor LIKE %source%`; instr avoids LIKE's wildcards in the source).
-- A NULL parameter keeps the column: :new_body, :attempts, :prepend. :move_to_pending (0/1)
-- puts the job back to PENDING and clears the claim; run_after is set either way, as the
-- original did. updated_at = now also extends the claim of a job that stays IN_PROGRESS.
-- A cancelled job (attempts_remaining 0: cancel_jobs.sql) keeps no attempt (:attempts sets
-- attempts_allowed only), and :move_to_pending ends it FAILED with ' cancelled' appended after the
-- status prepended (base.ended_status), its claim kept as a final failure ack keeps it.
-- Params: :queue, :priority, :local_id, :source, :run_after_ms, :move_to_pending, :new_body,
-- :attempts, :prepend, :status_limit, :now_ms.
-- Returns the job's group (NULL: ungrouped) and new state: a grouped job FAILED here left its group.
UPDATE jobs
   SET state = CASE WHEN NOT :move_to_pending THEN state WHEN attempts_remaining = 0 THEN 3 ELSE 0 END,
       claim_descriptor = CASE WHEN :move_to_pending AND attempts_remaining > 0 THEN NULL ELSE claim_descriptor END,
       run_after_ms = :run_after_ms,
       body = coalesce(:new_body, body),
       attempts_allowed = coalesce(:attempts, attempts_allowed),
       attempts_remaining = CASE WHEN attempts_remaining = 0 THEN 0 ELSE coalesce(:attempts, attempts_remaining) END,
       custom_status = CASE WHEN :move_to_pending AND attempts_remaining = 0 THEN
                                CASE WHEN coalesce(:prepend, '') || custom_status = '' THEN 'cancelled'
                                     ELSE substr(coalesce(:prepend, '') || custom_status, 1, max(0, :status_limit - 10))
                                          || ' cancelled' END
                            WHEN :prepend IS NULL THEN custom_status
                            ELSE substr(:prepend || custom_status, 1, :status_limit) END,
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
   AND instr(claim_descriptor, :source) > 0
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state
