-- Make waiting jobs active, PENDING as they were enqueued (groups_waiting_oldest.sql found them;
-- group_jobs_unwait.sql then clears their flag). Params: :ids (a JSON array of local ids).
UPDATE jobs SET state = 0 WHERE local_id IN (SELECT value FROM json_each(:ids)) AND state = -1
