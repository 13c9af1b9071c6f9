-- Count jobs of one state in a run_after range, capped: the inner LIMIT stops the scan at the
-- cap (MYSQL_COUNT_LIMIT), as the original did, so a count over millions of rows stays fast.
-- {table}: the priority's jobs table.
-- %s: state, run_after from, run_after to (both inclusive), cap.
SELECT COUNT(*) FROM (
  SELECT 1 FROM {table}
   WHERE state = %s AND run_after >= %s AND run_after <= %s
   LIMIT %s
) AS job_info
