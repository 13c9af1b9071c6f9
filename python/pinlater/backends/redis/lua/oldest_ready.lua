--[[ oldest_ready: the lowest score up to now of each of many PENDING sets (the run after of each
queue's and priority's oldest ready job), for /metrics' queue ages of every queue of a shard in
few round trips (RedisStore.oldest_ready sends the sets of all its queues, a chunk per call).

Held jobs (the dequeue broker's, out of PENDING) are left out: they are being handed out. A
member whose job hash was evicted may answer for its set until a dequeue meets it.

KEYS[1]     the first PENDING set (plq_{shard}_{queue}.p{p}_s0), and so on to KEYS[n]; a missing
            key is an empty set
ARGV[1]     now: the highest score that is ready (ZRANGEBYSCORE syntax)

Returns one value per key in KEYS order: the set's lowest score if it is at most now (text), else
nil.
]]
local now = ARGV[1]
local out = {}
for i, key in ipairs(KEYS) do
  local first = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
  out[i] = first[2] or false
end
return out
