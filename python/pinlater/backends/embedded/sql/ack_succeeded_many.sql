-- Mark claimed jobs SUCCEEDED, all of one priority with one status to append: one statement for
-- the lot, not one per job (the Rust writer's successes on a queue without ordered groups; a
-- statement per job cost it about 1.2 us more a job, binding, stepping and resetting each). A
-- job that is not IN_PROGRESS is left alone, as in ack_succeeded.sql, which this must match.
-- The unary + keeps SQLite from walking the queue's IN_PROGRESS jobs along jobs_by_run_after:
-- one rowid probe per id instead.
-- Params: :queue, :priority, :ids (a JSON array of local ids), :append, :status_limit, :now_ms.
UPDATE OR FAIL jobs
   SET state = 2,
       -- no status and nothing to append (most acks): no concatenation and no copy
       custom_status = CASE WHEN :append = '' AND custom_status = '' THEN custom_status
                            ELSE substr(custom_status || :append, 1, :status_limit) END,
       updated_at_ms = :now_ms
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 1
