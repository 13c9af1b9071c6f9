--[[ get_queue_names: every queue name registered on the shard.

As lua/get_queue_names.lua, on the compact names set (score: creation time in ms). The store may
as well read it with a plain ZRANGE.

KEYS[1]  the shard's queue names sorted set (plc:{S}:q)

Returns the names, oldest first.
]]
return redis.call('ZRANGE', KEYS[1], 0, -1)
