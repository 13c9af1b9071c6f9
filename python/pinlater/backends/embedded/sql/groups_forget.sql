-- group_forget.sql for many groups of a queue in one statement. Params: :queue, :groups (a JSON
-- array of group keys).
DELETE FROM groups WHERE queue = :queue AND group_key IN (SELECT value FROM json_each(:groups))
