--[[ monitor_idle: which of some queues have anything for the monitor (ShardStore.monitor_idle).

KEYS[1]...  per queue, ARGV[1] keys whose existence means work for the monitor's sweeps (store.py,
            monitor_keys): each priority's IN_PROGRESS, SUCCEEDED and FAILED sets and the
            broker's held and hold expiry sets (plq_{S}_{Q}.p{p}_s1, _s2, _s3, _h, _x), the
            expiry index and the dedup GC's sets (pld_{S}_{Q}.e, .g, .r)
ARGV[1]     keys per queue
Returns one count per queue, in order: how many of its keys exist (0: nothing for the monitor;
Redis deletes a set or hash when its last member goes).
]]
--@include monitor_idle
