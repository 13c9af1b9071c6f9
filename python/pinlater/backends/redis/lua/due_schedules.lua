--[[ due_schedules: the unpaused schedules of every queue whose next run has come, earliest first (ShardStore.due_schedules): the head of the due set, not a scan of every schedule.

The code is lib/schedules.lua's (both layouts run it; keys.py names the keys).

KEYS[1]  the schedules' definitions hash (pls_{shard}.d)
KEYS[2]  the due schedules' sorted set (pls_{shard}.n)
ARGV[1]  now (ms)
ARGV[2]  the most schedules to return
ARGV[3]  the most bytes of definitions to return (the first whatever its size)

Returns '{queue}:{name}', definition, ... earliest next run first.
]]
--@include schedules
return schedules.due()
