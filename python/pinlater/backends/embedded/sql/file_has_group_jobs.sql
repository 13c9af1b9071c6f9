-- Whether the file has a grouped job (of any queue, finished or not): the first row of
-- group_jobs. GC of a file that never had a grouped job skips group_jobs_forget.sql. No params.
-- Returns: a row, or none.
SELECT 1 FROM group_jobs LIMIT 1
