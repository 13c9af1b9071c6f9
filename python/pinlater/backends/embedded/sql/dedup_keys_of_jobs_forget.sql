-- Forget the records without a window (held_until_ms 0: schema.sql, dedup_keys_windowed) of
-- deleted jobs of a queue, one probe of dedup_keys_by_job per job. A record that a later job
-- took names that job, and stays. Params: :queue, :ids (a JSON array of local ids).
DELETE FROM dedup_keys
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND held_until_ms = 0 AND +queue = :queue
