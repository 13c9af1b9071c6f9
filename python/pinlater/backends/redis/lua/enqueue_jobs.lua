--[[ enqueue_jobs: insert a batch of PENDING jobs (any mix of priorities) in one call.

Ids come from the queue's counter (one INCRBY for the batch), so they are consecutive and in the
order of the jobs. Each job gets a hash and a member in its priority's PENDING set, scored by its
run-after time.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     the queue's id counter (plj_{shard}_{queue})
KEYS[3..n]  PENDING sorted sets of the priorities in the batch (plq_{shard}_{queue}.p{p}_s0)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float (ca and ua)
ARGV[4]     number of jobs, n
then 5 per job, in order:
  ARGV[i]   index into KEYS of the job's PENDING set
  ARGV[i+1] body (bd)
  ARGV[i+2] attempts allowed (al, and ar)
  ARGV[i+3] run after, seconds as float (the score)
  ARGV[i+4] custom status, already truncated (cs)

Hash fields: bd al ar ca ua cs (keys.JobField).
Returns the local ids in job order, or -1 if the queue does not exist.
]]
local names_key, counter_key = KEYS[1], KEYS[2]
local queue, hash_prefix, now, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local ids = {}
if n == 0 then
  return ids
end
local first = redis.call('INCRBY', counter_key, n) - n + 1
local scored = {}  -- KEYS index -> {score, id, score, id, ...}: one ZADD per set, not per job
for j = 0, n - 1 do
  local a = 5 + 5 * j
  local id = tostring(first + j)
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
  ids[j + 1] = first + j
end
for k, pairs_of_set in pairs(scored) do
  -- unpack stays far below Lua's C stack limit (8000) in chunks of 1000 members
  for i = 1, #pairs_of_set, 2000 do
    redis.call('ZADD', KEYS[k], unpack(pairs_of_set, i, math.min(i + 1999, #pairs_of_set)))
  end
end
return ids
