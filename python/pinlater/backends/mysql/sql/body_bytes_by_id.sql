-- The bytes the bodies of some jobs of one priority hold, by local id (a lookup's budget).
-- {table}: the priority's jobs table; {ids}: the local ids.
-- Returns: one row, the sum (NULL if no job is found).
SELECT SUM(LENGTH(body)) FROM {table} WHERE local_id IN ({ids})
