--[[ claim_reserved: claim jobs the dequeue broker reserved (reserve_jobs.lua), exactly as
dequeue_jobs.lua claims, only where the job is still in its PENDING set under this live
reservation (a member of the reserved set, which holds only live ones once lapsed entries are
removed, with cd = the reservation).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..n]  three per priority named: PENDING set, IN_PROGRESS set, reserved set
            (plq_{shard}_{queue}.p{p}_s0, plq_{shard}_{queue}.p{p}_s1, plq_{shard}_{queue}.p{p}_r)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float
ARGV[4]     reservation
ARGV[5]     number of jobs, n
then 3 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other two follow)
  ARGV[i+1] local id
  ARGV[i+2] the job's claim descriptor (the broker claims many workers' jobs in one call)

Returns the 1-based numbers of the jobs claimed, or -1 if the queue does not exist.
]]
local names_key = KEYS[1]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local reservation, n = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
for k = 4, #KEYS, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
end
-- Checks per job; the set moves as one variadic command per set (in chunks below Lua's limit).
local out, moved = {}, {}
for j = 0, n - 1 do
  local k, id, claim = tonumber(ARGV[6 + 3 * j]), ARGV[7 + 3 * j], ARGV[8 + 3 * j]
  local pending_key, reserved_key = KEYS[k], KEYS[k + 2]
  local hash_key = hash_prefix .. id
  if redis.call('ZSCORE', reserved_key, id) and redis.call('ZSCORE', pending_key, id)
      and redis.call('HGET', hash_key, 'cd') == reservation then
    redis.call('HSET', hash_key, 'ua', now, 'cd', claim)
    moved[k] = moved[k] or {}
    table.insert(moved[k], id)
    out[#out + 1] = j + 1
  end
end
for k, ids in pairs(moved) do
  for i = 1, #ids, 1000 do
    local last = math.min(i + 999, #ids)
    redis.call('ZREM', KEYS[k], unpack(ids, i, last))
    redis.call('ZREM', KEYS[k + 2], unpack(ids, i, last))
    local args = {}
    for m = i, last do
      args[#args + 1] = now
      args[#args + 1] = ids[m]
    end
    redis.call('ZADD', KEYS[k + 1], unpack(args))
  end
end
return out
