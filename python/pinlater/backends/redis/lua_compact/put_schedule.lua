--[[ put_schedule: create or replace one schedule of a queue (ShardStore.put_schedule).

As lua/put_schedule.lua (the code is lua/lib/schedules.lua's): the keys are the compact layout's
(keys_compact.py), all with the shard's hash tag {S}, one slot.

KEYS[1]  the queue names sorted set (plc:{S}:q)
KEYS[2]  the schedules' definitions hash (plc:{S}:sd)
KEYS[3]  the due schedules' sorted set (plc:{S}:sn)
KEYS[4]  the schedules' index (plc:{S}:si)
ARGV[1]  queue name
ARGV[2]  schedule name
ARGV[3]  next_run_ms (integer, decimal)
ARGV[4]  '1' if paused (kept out of the due set), else '0'
ARGV[5]  spec (opaque text)

Returns 1, or -1 if the queue does not exist.
]]
--@include schedules
return schedules.put()
