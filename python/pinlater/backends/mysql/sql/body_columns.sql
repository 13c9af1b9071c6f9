-- The body column of each jobs table of one queue's database, to learn how long a body it holds.
-- Params: the database name (`plq_{shard}_{queue}`, unquoted).
-- Returns: table name, column type (blob, mediumblob, ...), its capacity in bytes.
SELECT TABLE_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND COLUMN_NAME = 'body'
