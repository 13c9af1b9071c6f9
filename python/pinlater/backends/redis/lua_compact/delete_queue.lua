--[[ delete_queue: unregister a queue and delete up to ARGV[3] of its jobs.

As lua/delete_queue.lua, in the compact layout. The first call removes the field `c` of the records
hash, so the queue is gone at once (the store removes the name from the shard's names set
itself: another slot in a cluster); the store repeats the call until it returns 0 so that a large
queue never blocks Redis for long. The records of the jobs taken from the sets go with one HDEL
per chunk; a ready list's entries go from its head a page at a time, with their records (and
the tombstones). Once no job is left, the holders hashes and every record no set names are deleted
outright. The id counter (field `id` of the records hash) is kept, as the original keeps its
counter, so ids are never handed out twice.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2..m]  every sorted set of the queue whose members are its jobs' ids: the state sets, the
            held and hold expiry sets (plc:{S:Q}:p{p}:s{s}, :h, :x)
KEYS[m+1..] the ready lists (plc:{S:Q}:p{p}:r, ARGV[5] of them), then the keys deleted outright
            once no job is left: the holders hashes (plc:{S:Q}:p{p}:o) and the dedup records
            (plc:{S:Q}:dk, :di, :dg), the expiry index and count (:xe, :xn), with UNLINK as in
            lua/delete_queue.lua
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     the most jobs to delete in this call
ARGV[4]     how many of the last KEYS are deleted outright
ARGV[5]     how many ready lists come before them (none: 0)

Returns how many jobs are left to delete (0: done).
]]
--@include records
local meta_key = KEYS[1]
local records_key, budget = ARGV[2], tonumber(ARGV[3])
local outright = tonumber(ARGV[4])
local lists = tonumber(ARGV[5] or 0)
local last_set = #KEYS - outright - lists
redis.call('HDEL', meta_key, 'c')
local left = 0
for k = last_set + 1, last_set + lists do
  local ready_key = KEYS[k]
  if budget > 0 then
    local entries = redis.call('LRANGE', ready_key, 0, budget - 1)
    if #entries > 0 then
      redis.call('LTRIM', ready_key, #entries, -1)
      delete_records(records_key, entries)  -- a marker names no record: no field goes
      budget = budget - #entries
    end
  end
  left = left + redis.call('LLEN', ready_key)
end
for k = 2, last_set do
  local set_key = KEYS[k]
  if budget > 0 then
    local ids = redis.call('ZRANGE', set_key, 0, budget - 1)
    if #ids > 0 then
      redis.call('ZREMRANGEBYRANK', set_key, 0, #ids - 1)
      delete_records(records_key, ids)
      budget = budget - #ids
    end
  end
  left = left + redis.call('ZCARD', set_key)
end
if left == 0 then
  -- the records hash holds the id counter too (KEYS[1] is it): keep only that
  local counter = redis.call('HGET', meta_key, 'id')
  -- the fields t{p} go with the records hash: the lists they counted are gone
  redis.call('UNLINK', records_key, unpack(KEYS, last_set + lists + 1, #KEYS))  -- freed off the main thread
  if counter then
    redis.call('HSET', meta_key, 'id', counter)
  end
end
return left
