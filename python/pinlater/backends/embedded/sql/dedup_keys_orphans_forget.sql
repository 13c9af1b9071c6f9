-- Forget every record without a window (held_until_ms 0) whose job is gone: at the first open by
-- a version 6 build of a file of an earlier version (store.py: UPGRADES), in the transaction that
-- sets the version, so an open interrupted before it ends leaves the version as it was and the
-- next open runs it again. Such a record goes with its job (dedup_keys_of_jobs_forget.sql), but a
-- build before version 6 that served the file in between deleted jobs without their records, and
-- no walk reaches them (they are not in the GC's index). It reads every record of the file,
-- about what building that index costs in the same open. No params.
DELETE FROM dedup_keys
 WHERE held_until_ms = 0
   AND NOT EXISTS (SELECT 1 FROM jobs
                    WHERE jobs.local_id = dedup_keys.local_id
                      AND jobs.queue = dedup_keys.queue AND jobs.priority = dedup_keys.priority)
