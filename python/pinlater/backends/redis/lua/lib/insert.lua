-- insert: the insert of new PENDING jobs, shared by enqueue_jobs.lua and enqueue_keyed_jobs.lua
-- (scripts that say `--@include insert` get this file pasted in).
--
-- `slots` lists, per job in order, where its five ARGV values start (ARGV[a] .. ARGV[a + 4]):
-- the KEYS index of its PENDING set, body, attempts allowed, run after (seconds as float) and
-- custom status (already truncated). Ids come from the queue's counter (one INCRBY for the
-- batch), so they are consecutive and in the order of `slots`. Each job gets a hash (fields bd al
-- ar ca ua cs, keys.JobField) and a member in its priority's PENDING set, scored by run after.
-- Returns the ids (numbers), in order.
local function insert_jobs(counter_key, hash_prefix, now, slots)
  local ids = {}
  local n = #slots
  if n == 0 then
    return ids
  end
  local first = redis.call('INCRBY', counter_key, n) - n + 1
  local scored = {}  -- KEYS index -> {score, id, score, id, ...}: one ZADD per set, not per job
  for j = 1, n do
    local a = slots[j]
    local id = tostring(first + j - 1)
    redis.call('HSET', hash_prefix .. id,
      'bd', ARGV[a + 1], 'al', ARGV[a + 2], 'ar', ARGV[a + 2], 'ca', now, 'ua', now, 'cs', ARGV[a + 4])
    local k = tonumber(ARGV[a])
    local pairs_of_set = scored[k]
    if not pairs_of_set then
      pairs_of_set = {}
      scored[k] = pairs_of_set
    end
    pairs_of_set[#pairs_of_set + 1] = ARGV[a + 3]
    pairs_of_set[#pairs_of_set + 1] = id
    ids[j] = first + j - 1
  end
  for k, pairs_of_set in pairs(scored) do
    -- unpack stays far below Lua's C stack limit (8000) in chunks of 1000 members
    for i = 1, #pairs_of_set, 2000 do
      redis.call('ZADD', KEYS[k], unpack(pairs_of_set, i, math.min(i + 1999, #pairs_of_set)))
    end
  end
  return ids
end
