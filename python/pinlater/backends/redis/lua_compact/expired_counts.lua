--[[ expired_counts: the expired counts of some queues, as lua/expired_counts.lua (in a cluster,
one queue per call: its slot).

KEYS[1]..KEYS[n]  the queues' expired counts (plc:{S:Q}:xn, keys_compact.py)
Returns n counts, in order (0 for a queue none of whose jobs expired).
]]
--@include expired_counts
