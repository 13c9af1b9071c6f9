-- Create or replace one schedule.
-- {table}: the queue's schedules table. %s: name (UTF-8 bytes), spec, next_run (ms), paused.
INSERT INTO {table} (name, spec, next_run, paused) VALUES (%s, %s, %s, %s)
    ON DUPLICATE KEY UPDATE spec = VALUES(spec), next_run = VALUES(next_run), paused = VALUES(paused)
