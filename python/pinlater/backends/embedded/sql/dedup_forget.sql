-- Forget one key record of a queue (GC). Params: :queue, :dedup_key.
DELETE FROM dedup_keys WHERE queue = :queue AND dedup_key = :dedup_key
