--[[ create_queue: register a queue name on the shard; a no-op if it is already there.

KEYS[1]  queue names sorted set (pln_{shard})
ARGV[1]  queue name
ARGV[2]  now, seconds as float (the member's score: the creation time, as the original)

Returns 1 if the queue was created, 0 if it existed.
]]
local names_key = KEYS[1]
local queue, now = ARGV[1], ARGV[2]
return redis.call('ZADD', names_key, 'NX', now, queue)
