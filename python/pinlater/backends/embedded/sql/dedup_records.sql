-- dedup_record.sql for many keys in one statement. Params: :queue, :rows (a JSON array of
-- [dedup_key, priority, local_id, held_until_ms], the keys distinct).
INSERT INTO dedup_keys (queue, dedup_key, priority, local_id, held_until_ms)
SELECT :queue, json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]')
  FROM json_each(:rows)
 WHERE true  -- INSERT ... SELECT needs a WHERE before ON CONFLICT (SQLite's parser)
    ON CONFLICT (queue, dedup_key) DO UPDATE
   SET priority = excluded.priority, local_id = excluded.local_id, held_until_ms = excluded.held_until_ms
