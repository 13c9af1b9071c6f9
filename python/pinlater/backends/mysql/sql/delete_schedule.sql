-- Remove one schedule.
-- {table}: the queue's schedules table. %s: name (UTF-8 bytes).
DELETE FROM {table} WHERE name = %s
