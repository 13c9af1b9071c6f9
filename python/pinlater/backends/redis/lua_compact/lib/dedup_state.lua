-- dedup_state: how enqueue_keyed_jobs.lua and gc_dedup_keys.lua read a holder's state in the
-- compact layout (as lua/lib/dedup_state.lua does in the original one), from the group of
-- DEDUP_GROUP keys each script is passed per priority: its PENDING, SUCCEEDED and FAILED sets
-- and its ready list (plc:{S:Q}:p{p}:s0, :s2, :s3, :r; the list for the insert, lib/insert.lua).

local DEDUP_GROUP = 4

-- Whether job `id` is PENDING (ready, later, in a ready list or held by a broker) or
-- IN_PROGRESS: its record is there and no tombstone (not deleted, collected or evicted), and it
-- is in neither final set of its priority, whose group starts at KEYS[base]. (A PENDING job of a
-- ready list is in no set, and finding it there would cost an LPOS: the records hash answers.)
local function job_active(records_key, base, id)
  if redis.call('HSTRLEN', records_key, id) == 0 then
    return false
  end
  return not redis.call('ZSCORE', KEYS[base + 1], id) and not redis.call('ZSCORE', KEYS[base + 2], id)
end

-- Whether job `id` still exists, in any state (its record in the records hash `jobs`, not a
-- tombstone): the GC keeps a record while its job exists, so lookups and scans show its key.
local function job_exists(jobs, id)
  return redis.call('HSTRLEN', jobs, id) > 0
end
