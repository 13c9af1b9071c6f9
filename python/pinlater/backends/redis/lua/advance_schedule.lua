--[[ advance_schedule: compare-and-set of a schedule's next run (ShardStore.advance_schedule): of two servers that fired one tick, one moves it.

The code is lib/schedules.lua's (both layouts run it; keys.py names the keys).

KEYS[1]  the schedules' definitions hash (pls_{shard}.d)
KEYS[2]  the due schedules' sorted set (pls_{shard}.n)
ARGV[1]  queue name
ARGV[2]  schedule name
ARGV[3]  the next_run_ms expected (decimal)
ARGV[4]  the new next_run_ms (decimal)

Returns 1 if it moved, 0 if the schedule is gone or its next run is not the expected one.
]]
--@include schedules
return schedules.advance()
