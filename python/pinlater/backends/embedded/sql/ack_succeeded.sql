-- Mark one claimed job SUCCEEDED; a job that is not IN_PROGRESS is left alone.
-- For a queue without ordered groups (no row in groups: queue_has_groups.sql); else ack_succeeded_grouped.sql,
-- which returns what the groups need, at a cost per job (RETURNING about doubles an UPDATE's).
-- Params: :queue, :priority, :local_id, :append, :status_limit, :now_ms.
UPDATE jobs
   SET state = 2,
       -- no status and nothing to append (most acks): no concatenation and no copy
       custom_status = CASE WHEN :append = '' AND custom_status = '' THEN custom_status
                            ELSE substr(custom_status || :append, 1, :status_limit) END,
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
