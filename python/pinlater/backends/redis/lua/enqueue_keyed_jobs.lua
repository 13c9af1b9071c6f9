--[[ enqueue_keyed_jobs: insert each job as enqueue_jobs.lua does, unless a job holds its dedup
key (ShardStore.enqueue_keyed_jobs), all in one call: two servers enqueueing one key at once
make one job.

A key is held by the job its record names (lib/dedup.lua) while now < the record's held-until
(that job's enqueue time plus its window) or while the job is PENDING or IN_PROGRESS
(lib/dedup_state.lua: in its priority's PENDING, IN_PROGRESS or held set). A held key answers
its holder and changes nothing. A key not held is taken: the job is inserted (lib/insert.lua,
one INCRBY for all the jobs inserted) and the record names it, its id and gc entries replacing
the old holder's. The keys of one call are distinct (the caller collapses repeats).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     the queue's id counter (plj_{shard}_{queue})
KEYS[3..5]  the dedup records, ids hash and gc set (pld_{shard}_{queue}.k, .i, .g)
KEYS[6]     the expiry index (pld_{shard}_{queue}.e)
KEYS[7..]   three per priority 1..m: PENDING, IN_PROGRESS and held sets
            (plq_{shard}_{queue}.p{p}_s0, _s1, _h): priority p's start at 7 + 3 * (p - 1)
KEYS[7 + 3m] the dedup runs (pld_{shard}_{queue}.r, lib/dedup.lua)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float (ca and ua)
ARGV[4]     number of jobs, n
ARGV[5]     now, ms
ARGV[6]     m, the priorities whose keys are in KEYS
then 10 per job, in order:
  ARGV[i]   index into KEYS of the job's PENDING set (its priority's first key)
  ARGV[i+1] body (bd)
  ARGV[i+2] attempts allowed (al, and ar)
  ARGV[i+3] run after, seconds as float (the score)
  ARGV[i+4] custom status, already truncated (cs)
  ARGV[i+5] dedup key ('' if none)
  ARGV[i+6] window, ms
  ARGV[i+7] 'k' if the job has a dedup key, else ''
  ARGV[i+8] its group: always '' (this layout keeps no groups)
  ARGV[i+9] its expiry, ms ('' if none): kept in the job hash's field ex, and the job in the
            expiry index

Returns 3 values per job, in order: priority, local id, 1 if the key was held (the holder's
priority and id) else 0 (the new job's); or -1 if the queue does not exist; or {-2, p} (nothing
changed) if a record names a holder of a priority p > m: the caller calls again with m >= p.
]]
--@include insert
--@include dedup
--@include dedup_state
--@include dedup_calls
local names_key, counter_key = KEYS[1], KEYS[2]
local records_key, ids_key, gc_key = KEYS[3], KEYS[4], KEYS[5]
local queue, jobs, now = ARGV[1], ARGV[2], ARGV[3]
local n, now_ms, m = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local INSERT_READY_OFFSET = nil  -- no ready lists in this layout
local STRIDE = 10
local expiry_index_key = KEYS[6]
local runs_key = KEYS[7 + DEDUP_GROUP * m]

local function keyed(a)
  return ARGV[a + 7] == 'k'
end

local function inserted(a, id)
  local ex = ARGV[a + 9]
  if ex ~= '' then
    redis.call('HSET', jobs .. id, 'ex', ex)
    redis.call('ZADD', expiry_index_key, ex, id)
  end
end

return enqueue_dedup(counter_key, records_key, ids_key, gc_key, runs_key, jobs, now, now_ms, n, m, 7, INSERT_READY_OFFSET,
  STRIDE, keyed, nil, inserted)
