-- Create a queue; a no-op if it exists (createQueue is idempotent).
-- Params: :queue, :num_priorities, :now_ms.
INSERT OR IGNORE INTO queues (name, num_priorities, created_at_ms) VALUES (:queue, :num_priorities, :now_ms)
