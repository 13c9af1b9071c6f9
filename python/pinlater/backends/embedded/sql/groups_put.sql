-- group_put.sql for many groups of a queue in one statement. Params: :queue, :rows (a JSON
-- array of [group_key, active, waiting, tokens, refilled_at_ms], the groups distinct).
INSERT INTO groups (queue, group_key, active, waiting, tokens, refilled_at_ms)
SELECT :queue, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]')
  FROM json_each(:rows)
 WHERE true  -- INSERT ... SELECT needs a WHERE before ON CONFLICT (SQLite's parser)
    ON CONFLICT (queue, group_key) DO UPDATE
   SET active = excluded.active, waiting = excluded.waiting,
       tokens = excluded.tokens, refilled_at_ms = excluded.refilled_at_ms
