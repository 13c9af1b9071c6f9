-- The jobs jobs_promote.sql promoted no longer wait. Params: :ids (a JSON array of local ids).
UPDATE group_jobs SET waiting = 0 WHERE local_id IN (SELECT value FROM json_each(:ids))
