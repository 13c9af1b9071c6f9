-- Mark IN_PROGRESS jobs SUCCEEDED, appending the same status to each: one statement per
-- (priority, appended status) group. Jobs no longer IN_PROGRESS are left alone.
-- {table}: the priority's jobs table. {ids}: one %s per local id.
-- %s: status to append, custom status limit, updated_at (now), then the ids.
UPDATE {table}
   SET state = 2,
       custom_status = SUBSTRING(CONCAT(COALESCE(custom_status, ''), %s), 1, %s),
       updated_at = %s
 WHERE local_id IN ({ids}) AND state = 1
