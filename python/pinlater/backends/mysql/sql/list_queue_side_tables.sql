-- The shard's queues' databases holding one table of ours (expired_count, schedules), by name
-- from the data dictionary: the parts of a UNION ALL over them.
-- %s: LIKE pattern from names.queue_database_pattern, the table name.
-- Returns: database.
SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_SCHEMA LIKE %s AND TABLE_NAME = %s
