-- Flag a job that rejoined its group as waiting (see group_wait.sql). Params: :local_id.
UPDATE group_jobs SET waiting = 1 WHERE local_id = :local_id
