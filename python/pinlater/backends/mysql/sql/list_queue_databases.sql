-- The databases of one shard's queues.
-- %s: LIKE pattern from names.queue_database_pattern (plq\_{shard}\_...).
SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE %s
