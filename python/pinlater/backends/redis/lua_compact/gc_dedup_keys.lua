--[[ gc_dedup_keys: as lua/gc_dedup_keys.lua, in the compact layout: forget up to ARGV[4] dedup
records whose window has passed and whose job is gone, deleted or collected (lua/lib/dedup.lua,
lib/dedup_state.lua).

Looks at no more than ARGV[4] records, those whose gc score is at most now, lowest first. A
record whose job still exists, in any state, gets a later gc score (next_look), so the next call
looks at others (lookups and scans show a job's key while it exists); one whose held-until is
still ahead is scored by it.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its field c
KEYS[2..4]  the dedup records, ids hash and gc set (plc:{S:Q}:dk, :di, :dg)
KEYS[5..]   four per priority 1..m: PENDING, SUCCEEDED and FAILED sets and the ready list
            (plc:{S:Q}:p{p}:s0, :s2, :s3, :r): priority p's start at 5 + 4 * (p - 1)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, ms
ARGV[4]     limit
ARGV[5]     m, the priorities whose keys are in KEYS

Returns how many records were forgotten; -1 if the queue does not exist; or {-2, p} (nothing
changed) if a record names a priority p > m: the caller calls again with m >= p.
]]
--@include dedup
--@include dedup_state
--@include dedup_calls
local meta_key = KEYS[1]
local records_key, ids_key, gc_key = KEYS[2], KEYS[3], KEYS[4]
local jobs = ARGV[2]
local now_ms, limit, m = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
return gc_dedup(records_key, ids_key, gc_key, jobs, now_ms, limit, m)
