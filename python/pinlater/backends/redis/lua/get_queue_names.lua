--[[ get_queue_names: every queue name registered on the shard.

KEYS[1]  queue names sorted set (pln_{shard})

Returns the names, oldest first.
]]
return redis.call('ZRANGE', KEYS[1], 0, -1)
