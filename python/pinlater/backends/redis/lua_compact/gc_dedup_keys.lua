--[[ gc_dedup_keys: as lua/gc_dedup_keys.lua, in the compact layout: forget dedup records whose
window has passed and whose job is gone, deleted or collected (lua/lib/dedup.lua,
lib/dedup_state.lua), reading at most ARGV[4] ids.

Looks at the gc entries whose score is at most now, lowest first (lua/lib/dedup_calls.lua's
gc_dedup: an entry is an id or a run of ids, which counts its ids). A record whose job still
exists, in any state, keeps its entry with a later score (next_look), so the next call looks at
others (lookups and scans show a job's key while it exists); one whose held-until is still ahead
keeps it scored by that.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its field c
KEYS[2..5]  the dedup records, ids hash, gc set and runs (plc:{S:Q}:dk, :di, :dg, :dr)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j, KEYS[1]): a job exists while its record does
ARGV[3]     now, ms
ARGV[4]     limit

Returns how many records were forgotten; -1 if the queue does not exist.
]]
--@include dedup
--@include dedup_state
--@include dedup_calls
local meta_key = KEYS[1]
local records_key, ids_key, gc_key = KEYS[2], KEYS[3], KEYS[4]
local jobs = ARGV[2]
local now_ms, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
return gc_dedup(records_key, ids_key, gc_key, KEYS[5], jobs, now_ms, limit)
