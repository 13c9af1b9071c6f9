--[[ create_queue: mark a queue as existing on the shard; a no-op if it is already there.

As lua/create_queue.lua, except where the queue is registered: the field `c` of the queue's meta
hash (its creation time in ms), which every compact script checks instead of the names set. The
shard's names set (plc:{S}:q) lives in another slot in a cluster, so the store adds the name
there itself, beside this script.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
ARGV[1]  queue name (unused: the meta hash is the queue's own)
ARGV[2]  now, seconds as float (the creation time)

Returns 1 if the queue was created, 0 if it existed.
]]
--@include records
return redis.call('HSETNX', KEYS[1], 'c', to_ms(ARGV[2]))
