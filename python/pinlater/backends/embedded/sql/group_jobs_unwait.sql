-- Jobs that waited in their groups and ended without running (cancelled, expired) no longer wait,
-- so promotions (group_promote.sql, groups_unwait_oldest.sql) never pick them. The Rust writer
-- also runs it on the jobs it promotes, one per group (groups_first_waiting.sql read them).
-- Params: :ids (a JSON array of local ids).
UPDATE OR FAIL group_jobs SET waiting = 0 WHERE local_id IN (SELECT value FROM json_each(:ids)) AND waiting = 1
