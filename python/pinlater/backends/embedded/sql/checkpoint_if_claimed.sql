-- Checkpoint one job, only while it is IN_PROGRESS under a claim containing :source (the
-- original's `claim_descriptor LIKE %source%`; instr avoids LIKE's wildcards in the source).
-- A NULL parameter keeps the column: :new_body, :attempts, :prepend. :move_to_pending (0/1)
-- puts the job back to PENDING and clears the claim; run_after is set either way, as the
-- original did. updated_at = now also extends the claim of a job that stays IN_PROGRESS.
-- Params: :queue, :priority, :local_id, :source, :run_after_ms, :move_to_pending, :new_body,
-- :attempts, :prepend, :status_limit, :now_ms.
UPDATE jobs
   SET state = CASE WHEN :move_to_pending THEN 0 ELSE state END,
       claim_descriptor = CASE WHEN :move_to_pending THEN NULL ELSE claim_descriptor END,
       run_after_ms = :run_after_ms,
       body = coalesce(:new_body, body),
       attempts_allowed = coalesce(:attempts, attempts_allowed),
       attempts_remaining = coalesce(:attempts, attempts_remaining),
       custom_status = CASE WHEN :prepend IS NULL THEN custom_status
                            ELSE substr(:prepend || custom_status, 1, :status_limit) END,
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
   AND instr(claim_descriptor, :source) > 0
