-- Record a new job's group, and whether it waits. Params: :local_id, :queue, :group_key, :waiting (0/1).
INSERT INTO group_jobs (local_id, queue, group_key, waiting) VALUES (:local_id, :queue, :group_key, :waiting)
