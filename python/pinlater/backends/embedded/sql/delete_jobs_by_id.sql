-- Delete jobs of one queue by local id (those a body filter matched, in the same transaction).
-- The unary + keeps SQLite probing each id instead of scanning the queue's index.
-- Returns each deleted job's group, state and id, as delete_jobs.sql.
-- Params: :queue, :ids (a JSON array of local ids).
DELETE FROM jobs
 WHERE +queue = :queue AND local_id IN (SELECT value FROM json_each(:ids))
RETURNING (SELECT group_key FROM group_jobs WHERE group_jobs.local_id = jobs.local_id), state, local_id
