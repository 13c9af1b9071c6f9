-- The oldest :limit claims of a queue and priority last updated before :claimed_before_ms: the
-- jobs a claim-timeout sweep resurrects (resurrect_timed_out_jobs.sql, resurrect_expire.sql),
-- read in a read transaction of their own. No index orders IN_PROGRESS jobs by updated_at (see
-- schema.sql), so this reads every job in progress of the queue and priority along
-- jobs_by_run_after (about 9 ms per 100,000 here), once per priority and monitor pass. Under the
-- write lock, as it was, every write of the shard (the Rust writer's enqueues, dequeues and acks
-- too) waited that long; a reader holds up no writer (WAL). The write then changes these ids
-- alone, each checked again, and a pass that finds none writes nothing.
-- Params: :queue, :priority, :claimed_before_ms, :limit. Returns: local_id.
SELECT local_id FROM jobs
 WHERE queue = :queue AND priority = :priority AND state = 1 AND updated_at_ms < :claimed_before_ms
 ORDER BY updated_at_ms
 LIMIT :limit
