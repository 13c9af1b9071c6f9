--[[ lookup_jobs: find jobs by (priority, local id) and read them.

A job's state is the first of its priority's sets that holds it (PENDING, IN_PROGRESS,
SUCCEEDED, FAILED, then the held set, whose jobs are PENDING: see lib/holds.lua); its score is the
time that state keeps (run after, claim time or finish time). Jobs in no set are left out. A member whose hash is gone (evicted) is removed from its
set and counted, and left out.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     the queue's dedup ids hash (pld_{shard}_{queue}.i: id -> dedup key, keys.py)
KEYS[3..n]  five sorted sets per priority looked up: the four in state order, then the held set
            (plq_{shard}_{queue}.p{p}_s0 .. _s3, plq_{shard}_{queue}.p{p}_h)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     '1' to include bodies, else '0'
ARGV[4]     number of lookups, n
then 2 per lookup:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other four follow)
  ARGV[i+1] local id
ARGV[5+2n]  with bodies: the most bytes they may hold ('' or absent: no limit)

Hash fields: bd al ar cs ca ua cd ex (keys.JobField).
Returns {evicted, then 12 values per job found: lookup number (1-based), state (0..3), score,
al, ar, cs, ca, ua, cd (nil if none), bd (nil unless asked), expiry (ex, ms; nil if none), dedup
key (nil if none; one HMGET of the ids hash for all)}, or -1 if the queue does not exist, or
{-2, bytes} (nothing read or changed) if the bodies of a lookup with bodies hold more than its
budget.
]]
--@include keyed_rows
local names_key, ids_key = KEYS[1], KEYS[2]
local queue, hash_prefix, with_body, n = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end

-- With bodies and a budget: the bodies' lengths first (each job's once: its hash is named by
-- its id alone, whatever priority a descriptor gives), and none read past it.
local budget = with_body and tonumber(ARGV[5 + 2 * n] or '')
if budget then
  local held, counted = 0, {}
  for j = 0, n - 1 do
    local id = ARGV[6 + 2 * j]
    if not counted[id] then
      counted[id] = true
      held = held + redis.call('HSTRLEN', hash_prefix .. id, 'bd')
      if held > budget then
        return {-2, held}
      end
    end
  end
end
-- A lookup without bodies reads none (a job's al, read first, tells an evicted hash).
local fields = {'al', 'ar', 'cs', 'ca', 'ua', 'cd', 'ex'}
if with_body then
  fields = {'al', 'ar', 'cs', 'ca', 'ua', 'cd', 'ex', 'bd'}
end

local out = {0}
local rows = {}
local evicted = 0
for j = 0, n - 1 do
  local a = 5 + 2 * j
  local k = tonumber(ARGV[a])
  local id = ARGV[a + 1]
  for set = 0, 4 do
    local score = redis.call('ZSCORE', KEYS[k + set], id)
    local state = set % 4  -- the held set (4) is PENDING (0)
    if score then
      local hash_key = hash_prefix .. id
      local job = redis.call('HMGET', hash_key, unpack(fields))
      if not job[1] or (with_body and not job[8]) then
        if set < 4 then  -- an evicted held job is left to its holder's claim or the sweep
          redis.call('ZREM', KEYS[k + set], id)
          redis.call('DEL', hash_key)
          evicted = evicted + 1
        end
      else
        rows[#rows + 1] = {j + 1, state, score, job[1], job[2], job[3], job[4], job[5], job[6], job[8] or false,
          job[7], id}
      end
      break
    end
  end
end
emit_keyed_rows(out, rows, 11, 12, ids_key)
out[1] = evicted
return out
