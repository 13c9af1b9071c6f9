-- dedup_state: how enqueue_keyed_jobs.lua and gc_dedup_keys.lua read a holder's state in the
-- original layout (lua_compact/lib/dedup_state.lua is the compact layout's), from the group of
-- DEDUP_GROUP keys each script is passed per priority: its PENDING, IN_PROGRESS and held sets
-- (plq_{S}_{Q}.p{p}_s0, _s1, _h), all declared, so no job hash is read.

local DEDUP_GROUP = 3

-- Whether job `id` is PENDING (ready, later, or held by a broker) or IN_PROGRESS: a member of
-- one of the three sets of its priority, whose group starts at KEYS[base].
local function job_active(_, base, id)
  return (redis.call('ZSCORE', KEYS[base], id) or redis.call('ZSCORE', KEYS[base + 1], id)
    or redis.call('ZSCORE', KEYS[base + 2], id)) and true or false
end

-- Whether job `id` still exists, in any state (its hash, under the prefix `jobs`): the GC keeps a
-- record while its job exists, so lookups and scans show the job's key.
local function job_exists(jobs, id)
  return redis.call('EXISTS', jobs .. id) == 1
end
