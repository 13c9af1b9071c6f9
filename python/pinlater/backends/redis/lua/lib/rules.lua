-- rules: max in progress (QueueRules.max_in_progress) in the original layout, for the scripts
-- that say `--@include rules` (dequeue_jobs, reserve_jobs, claim_reserved). The original layout
-- keeps no ordered groups (RedisStore.groups_refused), so only the cap applies here.
--
-- The rules come at the END of a script's ARGV and KEYS (the "tail"), after its own, and only
-- when the queue has a cap:
--   ARGV: group concurrency, max in progress, group jobs per second (0: none), m
--   KEYS: the IN_PROGRESS sets of priorities 1..m (plq_{S}_{Q}.p{p}_s1)
-- (lua_compact/lib/groups.lua reads the same ARGV, with the compact layout's group keys.)

-- The tail after `fixed` ARGV values, or nil if there is none.
local function rules_tail(fixed)
  if #ARGV < fixed + 4 then
    return nil
  end
  local m = tonumber(ARGV[fixed + 4])
  return {cap = tonumber(ARGV[fixed + 2]), m = m, base = #KEYS - m + 1}
end

-- How many more jobs may go IN_PROGRESS under max in progress (math.huge without a cap): the
-- cap less the IN_PROGRESS jobs of every priority (one ZCARD each).
local function room(r)
  if not r or r.cap <= 0 then
    return math.huge
  end
  local n = 0
  for i = r.base, r.base + r.m - 1 do
    n = n + redis.call('ZCARD', KEYS[i])
  end
  return math.max(0, r.cap - n)
end
