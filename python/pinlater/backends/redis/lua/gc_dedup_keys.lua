--[[ gc_dedup_keys: forget up to ARGV[4] dedup records whose window has passed and whose job is
gone, deleted or collected (lib/dedup.lua, lib/dedup_state.lua).

Looks at no more than ARGV[4] records, those whose gc score is at most now, lowest first. A
record whose job still exists, in any state, gets a later gc score (next_look), so the next call
looks at others (lookups and scans show a job's key while it exists); one whose held-until is
still ahead is scored by it.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..4]  the dedup records, ids hash and gc set (pld_{shard}_{queue}.k, .i, .g)
KEYS[5..]   three per priority 1..m: PENDING, IN_PROGRESS and held sets
            (plq_{shard}_{queue}.p{p}_s0, _s1, _h): priority p's start at 5 + 3 * (p - 1)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, ms
ARGV[4]     limit
ARGV[5]     m, the priorities whose keys are in KEYS

Returns how many records were forgotten; -1 if the queue does not exist; or {-2, p} (nothing
changed) if a record names a priority p > m: the caller calls again with m >= p.
]]
--@include dedup
--@include dedup_state
--@include dedup_calls
local names_key = KEYS[1]
local records_key, ids_key, gc_key = KEYS[2], KEYS[3], KEYS[4]
local queue, jobs = ARGV[1], ARGV[2]
local now_ms, limit, m = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
return gc_dedup(records_key, ids_key, gc_key, jobs, now_ms, limit, m)
