-- Store a group's token bucket after a dequeue took (or looked for) a token.
-- Params: :queue, :group_key, :tokens, :refilled_at_ms.
UPDATE groups SET tokens = :tokens, refilled_at_ms = :refilled_at_ms
 WHERE queue = :queue AND group_key = :group_key
