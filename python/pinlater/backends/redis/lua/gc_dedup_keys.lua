--[[ gc_dedup_keys: forget dedup records whose window has passed and whose job is gone, deleted
or collected (lib/dedup.lua, lib/dedup_state.lua), reading at most ARGV[4] ids.

Looks at the gc entries whose score is at most now, lowest first (lib/dedup_calls.lua's
gc_dedup: an entry is an id or a run of ids, which counts its ids). A record whose job still
exists, in any state, keeps its entry with a later score (next_look), so the next call looks at
others (lookups and scans show a job's key while it exists); one whose held-until is still ahead
keeps it scored by that.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..5]  the dedup records, ids hash, gc set and runs (pld_{shard}_{queue}.k, .i, .g, .r)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.): a job exists while its hash does
ARGV[3]     now, ms
ARGV[4]     limit

Returns how many records were forgotten; -1 if the queue does not exist.
]]
--@include dedup
--@include dedup_state
--@include dedup_calls
local names_key = KEYS[1]
local records_key, ids_key, gc_key = KEYS[2], KEYS[3], KEYS[4]
local queue, jobs = ARGV[1], ARGV[2]
local now_ms, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
return gc_dedup(records_key, ids_key, gc_key, KEYS[5], jobs, now_ms, limit)
