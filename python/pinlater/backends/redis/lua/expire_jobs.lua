--[[ expire_jobs: expire up to ARGV[5] PENDING jobs of a queue whose expiry has come, soonest
expiry first (ShardStore.expire_jobs; the monitor calls it).

The queue's expiry index (keys.py: member id, score expiry in ms) is read from its lowest score,
a page at a time. Each entry due (score <= now) is taken out of the index; its job, if PENDING in
one of priorities 1..m (in its PENDING set, or held by the dequeue broker: its hold is dropped),
ends FAILED scored by now: ar 0, claim removed, ua = now, "expired" appended to cs, the expired
count one up. An entry whose job is not PENDING (finished, deleted, IN_PROGRESS: an IN_PROGRESS
job never expires, and one that comes back to PENDING past its expiry expires on its way or is
put back in the index) is only dropped. At most 4 * ARGV[5] entries are looked at: bounded work
whatever the queue holds.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     expiry index (pld_{shard}_{queue}.e)
KEYS[3]     expired count (pld_{shard}_{queue}.n)
KEYS[4..]   five per priority 1..m: PENDING and FAILED sets, held set, hold expiry set, holders
            hash (plq_{shard}_{queue}.p{p}_s0, _s3, _h, _x, _o): priority p's at 4 + 5 * (p - 1)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float
ARGV[4]     now, ms
ARGV[5]     limit
ARGV[6]     m

Hash fields: bd al ar ua cs cd (keys.JobField).
Returns how many jobs expired, or -1 if the queue does not exist.
]]
--@include holds
--@include cut_chars
--@include ended
local names_key, index_key, count_key = KEYS[1], KEYS[2], KEYS[3]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local now_ms, limit, m = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local expired, looked = 0, 0
while expired < limit and looked < 4 * limit do
  local ids = redis.call('ZRANGEBYSCORE', index_key, '-inf', now_ms, 'LIMIT', 0, math.min(limit - expired, 1000))
  if #ids == 0 then
    break
  end
  zrem_all(index_key, ids)
  looked = looked + #ids
  for _, id in ipairs(ids) do
    for p = 1, m do
      local k = 4 + 5 * (p - 1)
      local pending = redis.call('ZSCORE', KEYS[k], id)
      local held = not pending and redis.call('ZSCORE', KEYS[k + 2], id)
      if pending or held then
        local hash_key = hash_prefix .. id
        local job = redis.call('HMGET', hash_key, 'bd', 'al', 'cs')
        if job[1] and job[2] then  -- an evicted job is left to the next script that meets it
          if held then
            drop_holds(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], {id})
          else
            redis.call('ZREM', KEYS[k], id)
          end
          redis.call('ZADD', KEYS[k + 1], now, id)
          redis.call('HDEL', hash_key, 'cd')
          redis.call('HSET', hash_key, 'ar', 0, 'ua', now, 'cs', ended_status(job[3], EXPIRED, CUSTOM_STATUS_LIMIT))
          expired = expired + 1
        end
        break
      end
    end
  end
end
if expired > 0 then
  redis.call('INCRBY', count_key, expired)
end
return expired
