-- The jobs tables of some queues' databases that lack expire_at (expiry.migrate), by name from
-- the data dictionary.
-- %s: LIKE pattern of the databases (one queue's name, or names.queue_database_pattern), LIKE
-- pattern of the table names (names.JOBS_TABLE_PATTERN).
-- Returns: database, table.
SELECT t.TABLE_SCHEMA, t.TABLE_NAME
  FROM information_schema.TABLES t
  LEFT JOIN information_schema.COLUMNS c
    ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME AND c.COLUMN_NAME = 'expire_at'
 WHERE t.TABLE_SCHEMA LIKE %s AND t.TABLE_NAME LIKE %s AND c.COLUMN_NAME IS NULL
