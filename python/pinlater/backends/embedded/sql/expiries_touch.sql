-- A queue got a job with an expiry: make its row of expiries (count 0) if it has none.
-- Params: :queue.
INSERT OR FAIL INTO expiries (queue, expired) VALUES (:queue, 0) ON CONFLICT (queue) DO NOTHING
