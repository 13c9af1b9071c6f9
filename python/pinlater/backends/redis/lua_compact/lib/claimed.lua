-- claimed: what the compact ack and checkpoint scripts share (scripts that say
-- `--@include claimed` get this file pasted in, after records and sets).

-- The jobs a batch names that are IN_PROGRESS: `n` items of `stride` arguments from ARGV[first],
-- each starting with the KEYS index k of its priority's PENDING set (IN_PROGRESS is KEYS[k + 1])
-- and the job's id. Membership is asked as ack_jobs.lua's common path asks it: one ZADD NX of
-- the set's ids at -inf per chunk, which adds only those the set lacks (none, the usual batch:
-- then nothing is written and no score is formatted, as ZMSCORE formats each); where it added
-- some, or failed (a wrong type, or a Redis out of memory refusing the script's first write),
-- the set's members at -inf (only those it added: a claim time is a server's clock) go again and
-- ZMSCORE decides. Then one HMGET of the records found.
-- Returns member (member[k][id] is set while the job is in that IN_PROGRESS set) and the
-- records by id (read_records: a missing one is an evicted job).
local function claimed_jobs(records_key, first, stride, n)
  local ids_of, order = {}, {}
  for j = 0, n - 1 do
    local a = first + stride * j
    local k = tonumber(ARGV[a])
    if not ids_of[k] then
      ids_of[k] = {}
      order[#order + 1] = k
    end
    table.insert(ids_of[k], ARGV[a + 1])
  end
  local member, present = {}, {}
  for _, k in ipairs(order) do
    local key, ids, all = KEYS[k + 1], ids_of[k], true
    for i = 1, #ids, SET_CHUNK do
      local at_floor = {}
      for j = i, math.min(i + SET_CHUNK - 1, #ids) do
        at_floor[#at_floor + 1], at_floor[#at_floor + 2] = '-inf', ids[j]
      end
      if redis.pcall('ZADD', key, 'NX', unpack(at_floor)) ~= 0 then
        all = false  -- ZMSCORE decides for every chunk: no need to ask the rest
        break
      end
    end
    if all then
      local found = {}
      for _, id in ipairs(ids) do
        found[id] = true
      end
      member[k] = found
    else
      local stray = redis.pcall('ZRANGEBYSCORE', key, '-inf', '-inf')
      if not stray.err then
        zrem_all(key, stray)
      end
      member[k] = scores_of(key, ids)
    end
    for id in pairs(member[k]) do
      present[#present + 1] = id
    end
  end
  return member, read_records(records_key, present)
end
