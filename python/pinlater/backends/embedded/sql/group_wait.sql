-- Put a job that rejoined its group (retry_failed_jobs) behind the group's active jobs
-- (group_job_wait.sql flags it in group_jobs). Params: :local_id.
UPDATE jobs SET state = -1 WHERE local_id = :local_id AND state = 0
