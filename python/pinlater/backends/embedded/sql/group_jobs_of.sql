-- How many of some jobs each group has (jobs that just left their groups: acked SUCCEEDED).
-- Params: :ids (a JSON array of local ids). Returns: group_key, count; ungrouped jobs count nowhere.
SELECT group_key, count(*) FROM group_jobs WHERE local_id IN (SELECT value FROM json_each(:ids)) GROUP BY group_key
