-- Forget the group records of deleted jobs. Params: :ids (a JSON array of local ids).
DELETE FROM group_jobs WHERE local_id IN (SELECT value FROM json_each(:ids))
