--[[ monitor_idle: as lua/monitor_idle.lua, in the compact layout (in a cluster, one queue per
call: its slot).

KEYS[1]...  per queue, ARGV[1] keys (store.py, monitor_keys): each priority's IN_PROGRESS,
            SUCCEEDED and FAILED sets and the broker's held and hold expiry sets
            (plc:{S:Q}:p{p}:s1, :s2, :s3, :h, :x), the expiry index, the dedup GC's sets and the
            groups' counts (plc:{S:Q}:xe, :dg, :dr, :ga)
ARGV[1]     keys per queue
Returns one count per queue, in order: how many of its keys exist (0: nothing for the monitor).
]]
--@include monitor_idle
