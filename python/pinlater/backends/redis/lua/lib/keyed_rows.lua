-- keyed_rows: the dedup keys of the jobs a read returns (lookup_jobs.lua, scan_jobs.lua, in
-- both layouts: lua_compact's scripts include it from here), read with one HMGET of the queue's
-- dedup ids hash (id -> key, keys.py) per chunk of 1000 rows, not one call per job.

-- Append to `out` the first `width` values of each row, then the dedup key of the job whose id
-- is row[id_at]: row[key_at] if the row has it (a compact record's dk), else the ids hash's
-- (false for a job no dedup record names).
local function emit_keyed_rows(out, rows, width, id_at, ids_key, key_at)
  for i = 1, #rows, 1000 do
    local last = math.min(i + 999, #rows)
    local ids = {}
    for r = i, last do
      ids[#ids + 1] = rows[r][id_at]
    end
    local keys = redis.call('HMGET', ids_key, unpack(ids))
    for r = i, last do
      local row = rows[r]
      for v = 1, width do
        out[#out + 1] = row[v]
      end
      out[#out + 1] = key_at and row[key_at] or keys[r - i + 1]
    end
  end
end
