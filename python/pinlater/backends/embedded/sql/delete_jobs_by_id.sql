-- Delete jobs of one queue by local id (those a body filter matched, in the same transaction).
-- The unary + keeps SQLite probing each id instead of scanning the queue's index.
-- Returns each deleted job's group and state, as delete_jobs.sql.
-- Params: :queue, :ids (a JSON array of local ids).
DELETE FROM jobs
 WHERE +queue = :queue AND local_id IN (SELECT value FROM json_each(:ids))
RETURNING group_key, state
