-- The jobs tables of one queue's database (every priority it has), for a capped claim's count of
-- the queue's IN_PROGRESS jobs. Only names are read, from the data dictionary.
-- %s: the database name (`plq_{shard}_{queue}`, unquoted), LIKE pattern of the table names
-- (names.JOBS_TABLE_PATTERN).
-- Returns: table name.
SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME LIKE %s
