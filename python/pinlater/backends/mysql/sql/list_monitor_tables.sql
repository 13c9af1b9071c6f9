-- The tables of one shard's queues that can hold work for the monitor, for monitor_idle: every
-- jobs table, and the expiring and dedup_keys tables (ours). Only names are read, so the server
-- answers from its data dictionary without opening the tables.
-- %s: LIKE pattern from names.queue_database_pattern (plq\_{shard}\_...), LIKE pattern of the
-- jobs tables (names.JOBS_TABLE_PATTERN), the expiring table's name, the dedup_keys table's name.
-- Returns: database, table.
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES
 WHERE TABLE_SCHEMA LIKE %s AND (TABLE_NAME LIKE %s OR TABLE_NAME IN (%s, %s))
