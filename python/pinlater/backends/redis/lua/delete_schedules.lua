--[[ delete_schedules: remove one schedule, or every schedule of a queue (delete_queue, once the queue is unregistered, so no put_schedule can add one behind it).

The code is lib/schedules.lua's (both layouts run it; keys.py names the keys).

KEYS[1]  the schedules' definitions hash (pls_{shard}.d)
KEYS[2]  the due schedules' sorted set (pls_{shard}.n)
KEYS[3]  the schedules' index (pls_{shard}.i)
ARGV[1]  queue name
ARGV[2]  optional: the schedule's name; none: every schedule of the queue

Returns how many schedules were removed.
]]
--@include schedules
return schedules.delete()
