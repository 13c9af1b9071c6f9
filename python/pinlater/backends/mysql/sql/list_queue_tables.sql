-- The jobs tables of one shard's queues, for queue_counts: (database, table). Only names are
-- read, so the server answers from its data dictionary without opening the tables.
-- %s: LIKE pattern from names.queue_database_pattern (plq\_{shard}\_...), LIKE pattern of the
-- table names (names.JOBS_TABLE_PATTERN).
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA LIKE %s AND TABLE_NAME LIKE %s
