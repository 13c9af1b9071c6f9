-- group_get.sql for many groups of a queue in one statement. Params: :queue, :groups (a JSON
-- array of distinct group keys). Returns: group_key, active, waiting, tokens, refilled_at_ms; one
-- row per group that has one. CROSS JOIN keeps the groups the outer loop (one primary-key probe
-- each) rather than an IN list built into a temporary index first (about a third cheaper).
SELECT groups.group_key, groups.active, groups.waiting, groups.tokens, groups.refilled_at_ms
  FROM json_each(:groups) AS wanted
 CROSS JOIN groups
 WHERE groups.queue = :queue AND groups.group_key = wanted.value
