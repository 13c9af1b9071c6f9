-- group_job_record.sql for many new jobs: the hot path's writer repeats the VALUES row into
-- multi-row statements (rust/store/sqlite_inserts.rs, MultiRow).
-- Params: :local_id, :queue, :group_key, :waiting (0/1).
INSERT OR FAIL INTO group_jobs (local_id, queue, group_key, waiting) VALUES (:local_id, :queue, :group_key, :waiting)
