--[[ release_reservations: clear live reservations (reserve_jobs.lua) held by ARGV[4], so the
jobs are dequeuable at once: out of the reserved set, cd removed, ua = now; still PENDING.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..n]  two per priority named: PENDING set, reserved set
            (plq_{shard}_{queue}.p{p}_s0, plq_{shard}_{queue}.p{p}_r)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float
ARGV[4]     reservation
ARGV[5]     number of jobs, n
then 2 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the reserved set follows)
  ARGV[i+1] local id

Returns how many reservations were released, or -1 if the queue does not exist.
]]
local names_key = KEYS[1]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local reservation, n = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
for k = 3, #KEYS, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
end
local released = 0
for j = 0, n - 1 do
  local k, id = tonumber(ARGV[6 + 2 * j]), ARGV[7 + 2 * j]
  local pending_key, reserved_key = KEYS[k], KEYS[k + 1]
  local hash_key = hash_prefix .. id
  if redis.call('ZSCORE', reserved_key, id) and redis.call('ZSCORE', pending_key, id)
      and redis.call('HGET', hash_key, 'cd') == reservation then
    redis.call('ZREM', reserved_key, id)
    redis.call('HDEL', hash_key, 'cd')
    redis.call('HSET', hash_key, 'ua', now)
    released = released + 1
  end
end
return released
