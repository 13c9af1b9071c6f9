--[[ delete_queue: unregister a queue and delete up to ARGV[3] of its jobs.

The first call removes the name, so the queue is gone at once; the store repeats the call until
it returns 0 so that a large queue never blocks Redis for long. The id counter is kept, as the
original kept it, so ids are never handed out twice (a stale descriptor cannot reach a new job).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..m]  every sorted set of the queue whose members are its jobs' ids: the state sets, the
            held and hold expiry sets, and any set left by servers before the held set
            (plq_{shard}_{queue}.p{p}_s{s}, _h, _x, _r)
KEYS[m+1..] keys deleted outright once no job is left: the holders hashes (..._o), the dedup
            records (pld_{shard}_{queue}.k, .i, .g) and the expiry index and count (.e, .n),
            with UNLINK: the records of a million keys would keep Redis busy for most of a
            second in a DEL
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     the most jobs to delete in this call
ARGV[4]     how many of the last KEYS are deleted outright (n - m)

Returns how many jobs are left to delete (0: done).
]]
local names_key = KEYS[1]
local queue, hash_prefix, budget = ARGV[1], ARGV[2], tonumber(ARGV[3])
local last_set = #KEYS - tonumber(ARGV[4])
redis.call('ZREM', names_key, queue)
local left = 0
for k = 2, last_set do
  local set_key = KEYS[k]
  if budget > 0 then
    local ids = redis.call('ZRANGE', set_key, 0, budget - 1)
    if #ids > 0 then
      redis.call('ZREMRANGEBYRANK', set_key, 0, #ids - 1)
      for _, id in ipairs(ids) do
        redis.call('DEL', hash_prefix .. id)
      end
      budget = budget - #ids
    end
  end
  left = left + redis.call('ZCARD', set_key)
end
if left == 0 and last_set < #KEYS then
  redis.call('UNLINK', unpack(KEYS, last_set + 1, #KEYS))  -- freed off the main thread
end
return left
