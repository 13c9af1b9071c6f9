--[[ expired_counts: the expired counts of some queues (ShardStore.expired_counts).

KEYS[1]..KEYS[n]  the queues' expired counts (pld_{shard}_{queue}.n, keys.py)
Returns n counts, in order (0 for a queue none of whose jobs expired).
]]
--@include expired_counts
