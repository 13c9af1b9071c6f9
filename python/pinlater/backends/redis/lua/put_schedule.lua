--[[ put_schedule: create or replace one schedule of a queue (ShardStore.put_schedule).

The code is lib/schedules.lua's (both layouts run it; keys.py names the keys).

KEYS[1]  the queue names sorted set (pln_{shard})
KEYS[2]  the schedules' definitions hash (pls_{shard}.d)
KEYS[3]  the due schedules' sorted set (pls_{shard}.n)
KEYS[4]  the schedules' index (pls_{shard}.i)
ARGV[1]  queue name
ARGV[2]  schedule name
ARGV[3]  next_run_ms (integer, decimal)
ARGV[4]  '1' if paused (kept out of the due set), else '0'
ARGV[5]  spec (opaque text)

Returns 1, or -1 if the queue does not exist.
]]
--@include schedules
return schedules.put()
