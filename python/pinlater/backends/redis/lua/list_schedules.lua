--[[ list_schedules: a queue's schedules, by name (ShardStore.list_schedules).

The code is lib/schedules.lua's (both layouts run it; keys.py names the keys).

KEYS[1]  the queue names sorted set (pln_{shard})
KEYS[2]  the schedules' definitions hash (pls_{shard}.d)
KEYS[3]  the schedules' index (pls_{shard}.i)
ARGV[1]  queue name

Returns name, definition ('{next_run_ms}|{0 or 1: paused}|{spec}'), ... by name; empty for a
missing queue.
]]
--@include schedules
return schedules.list()
