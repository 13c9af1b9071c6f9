-- One group's row. Params: :queue, :group_key. Returns: active, waiting, tokens, refilled_at_ms
-- (or no row: the group has no unfinished job and a full bucket).
SELECT active, waiting, tokens, refilled_at_ms FROM groups WHERE queue = :queue AND group_key = :group_key
