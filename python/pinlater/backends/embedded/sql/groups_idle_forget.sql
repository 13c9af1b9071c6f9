-- Forget up to :limit groups of a queue with no unfinished job whose bucket was last taken
-- from at or before :full_before_ms (so it is full again). Along groups_idle.
-- Params: :queue, :full_before_ms, :limit.
DELETE FROM groups
 WHERE (queue, group_key) IN (SELECT queue, group_key FROM groups
                               WHERE queue = :queue AND active = 0 AND waiting = 0
                                 AND (refilled_at_ms IS NULL OR refilled_at_ms <= :full_before_ms)
                               LIMIT :limit)
