-- Forget up to :limit groups of a queue with no unfinished job whose bucket was last taken
-- from at or before :full_before_ms (so it is full again). One range of groups_idle (an idle
-- row always has a bucket: groups.py deletes the others at once), never the active groups.
-- Params: :queue, :full_before_ms, :limit.
DELETE FROM groups
 WHERE (queue, group_key) IN (SELECT queue, group_key FROM groups INDEXED BY groups_idle
                               WHERE queue = :queue AND active = 0 AND waiting = 0
                                 AND refilled_at_ms <= :full_before_ms
                               LIMIT :limit)
