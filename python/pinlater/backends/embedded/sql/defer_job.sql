-- Move a ready job of a group without a token to when its group's next token is due, so that
-- dequeues do not look at it before then (set_queue_rules allows it). Params: :local_id, :run_after_ms.
UPDATE jobs SET run_after_ms = :run_after_ms WHERE local_id = :local_id AND state = 0
