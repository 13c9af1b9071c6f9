--[[ due_schedules: the unpaused schedules of every queue whose next run has come, earliest first (ShardStore.due_schedules): the head of the due set, not a scan of every schedule.

As lua/due_schedules.lua (the code is lua/lib/schedules.lua's): the keys are the compact layout's
(keys_compact.py), all with the shard's hash tag {S}, one slot.

KEYS[1]  the schedules' definitions hash (plc:{S}:sd)
KEYS[2]  the due schedules' sorted set (plc:{S}:sn)
ARGV[1]  now (ms)
ARGV[2]  the most schedules to return
ARGV[3]  the most bytes of definitions to return (the first whatever its size)

Returns '{queue}:{name}', definition, ... earliest next run first.
]]
--@include schedules
return schedules.due()
