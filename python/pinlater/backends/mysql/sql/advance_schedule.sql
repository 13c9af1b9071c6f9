-- Move a schedule's next tick only if it is still the one the caller fired (compare-and-set:
-- of two servers that fired one tick, one moves it).
-- {table}: the queue's schedules table. %s: new next_run, name (UTF-8 bytes), expected next_run.
UPDATE {table} SET next_run = %s WHERE name = %s AND next_run = %s
