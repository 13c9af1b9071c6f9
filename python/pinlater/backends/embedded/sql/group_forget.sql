-- Forget a group with no unfinished job and a full bucket. Params: :queue, :group_key.
DELETE FROM groups WHERE queue = :queue AND group_key = :group_key
