--[[ delete_schedules: remove one schedule, or every schedule of a queue (delete_queue, once the queue is unregistered, so no put_schedule can add one behind it).

As lua/delete_schedules.lua (the code is lua/lib/schedules.lua's): the keys are the compact layout's
(keys_compact.py), all with the shard's hash tag {S}, one slot.

KEYS[1]  the schedules' definitions hash (plc:{S}:sd)
KEYS[2]  the due schedules' sorted set (plc:{S}:sn)
KEYS[3]  the schedules' index (plc:{S}:si)
ARGV[1]  queue name
ARGV[2]  optional: the schedule's name; none: every schedule of the queue

Returns how many schedules were removed.
]]
--@include schedules
return schedules.delete()
