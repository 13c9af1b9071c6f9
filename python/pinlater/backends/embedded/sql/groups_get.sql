-- group_get.sql for many groups of a queue in one statement. Params: :queue, :groups (a JSON
-- array of group keys). Returns: group_key, active, waiting, tokens, refilled_at_ms; one row per
-- group that has one.
SELECT group_key, active, waiting, tokens, refilled_at_ms
  FROM groups
 WHERE queue = :queue AND group_key IN (SELECT value FROM json_each(:groups))
