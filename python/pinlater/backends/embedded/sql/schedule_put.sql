-- Create or replace a schedule. Params: :queue, :name, :spec, :next_run_ms, :paused (0/1).
INSERT INTO schedules (queue, name, spec, next_run_ms, paused)
VALUES (:queue, :name, :spec, :next_run_ms, :paused)
    ON CONFLICT (queue, name) DO UPDATE
   SET spec = excluded.spec, next_run_ms = excluded.next_run_ms, paused = excluded.paused
