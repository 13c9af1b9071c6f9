-- ack_succeeded.sql for a queue with ordered groups (a row in groups), returning what they need.
-- Mark one claimed job SUCCEEDED; a job that is not IN_PROGRESS is left alone.
-- Returns the job's group (NULL: ungrouped): its leaving the group promotes the next job.
-- Params: :queue, :priority, :local_id, :append, :status_limit, :now_ms.
UPDATE jobs
   SET state = 2,
       custom_status = substr(custom_status || :append, 1, :status_limit),
       updated_at_ms = :now_ms
 WHERE local_id = :local_id AND queue = :queue AND priority = :priority AND state = 1
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id)
