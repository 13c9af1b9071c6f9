-- Make waiting jobs active, PENDING as they were enqueued (groups_unwait_oldest.sql took them
-- out of their groups' waiting ones). Params: :ids (a JSON array of local ids).
UPDATE OR FAIL jobs SET state = 0 WHERE local_id IN (SELECT value FROM json_each(:ids)) AND state = -1
