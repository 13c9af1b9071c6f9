--[[ list_schedules: a queue's schedules, by name (ShardStore.list_schedules).

As lua/list_schedules.lua (the code is lua/lib/schedules.lua's): the keys are the compact layout's
(keys_compact.py), all with the shard's hash tag {S}, one slot.

KEYS[1]  the queue names sorted set (plc:{S}:q)
KEYS[2]  the schedules' definitions hash (plc:{S}:sd)
KEYS[3]  the schedules' index (plc:{S}:si)
ARGV[1]  queue name

Returns name, definition ('{next_run_ms}|{0 or 1: paused}|{spec}'), ... by name; empty for a
missing queue.
]]
--@include schedules
return schedules.list()
