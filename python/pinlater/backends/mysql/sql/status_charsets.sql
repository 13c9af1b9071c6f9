-- The character set of the custom_status column of each jobs table of one queue's database
-- (text_charsets.py: text is fitted to it when a statement was refused for it).
-- Params: the database name (`plq_{shard}_{queue}`, unquoted).
-- Returns: table name, character set name.
SELECT TABLE_NAME, CHARACTER_SET_NAME
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND COLUMN_NAME = 'custom_status'
