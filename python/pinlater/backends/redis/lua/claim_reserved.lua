--[[ claim_reserved: claim jobs the dequeue broker holds (reserve_jobs.lua), exactly as
dequeue_jobs.lua claims, only where the hold is live and ARGV[4]'s: from the held set to the
IN_PROGRESS set scored by now, cd = the job's claim, ua = now. Lapsed holds go back to PENDING
first (lib/holds.lua), so a hold found in the holders hash is live.

The jobs come in groups that share a priority and a claim (one worker's dequeue), so each job
costs one argument.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..n]  five per priority named: PENDING set, IN_PROGRESS set, held set, hold expiry set,
            holders hash (plq_{shard}_{queue}.p{p}_s0, _s1, _h, _x, _o)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float
ARGV[4]     reservation
ARGV[5]     number of groups
then per group:
  ARGV[i]   index into KEYS of the PENDING set of the group's priority (the other four follow)
  ARGV[i+1] the group's claim descriptor
  ARGV[i+2] number of jobs in the group, m
  ARGV[i+3..i+2+m] their local ids
then, only when the queue has max in progress, the rules at the end of ARGV and KEYS
(lib/rules.lua): no more jobs are claimed than the room under it; the others stay held until
their holds lapse.

Hash fields: ua cd (keys.JobField). A job whose hash was evicted gets a partial one, which the
next script to meet it removes as evicted.

A job no longer held that is IN_PROGRESS under the claim given for it (claims are unique per
dequeue) counts as claimed and is left as it is: this call sent again after its reply was lost,
whose first run claimed it (answered "not claimed", the broker would withhold it until its claim
timed out and took an attempt).
Returns the 1-based numbers of the jobs claimed, counting through the groups in order, or -1 if
the queue does not exist.
]]
--@include holds
--@include rules
local names_key = KEYS[1]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local reservation, groups = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
-- Whether job `id` is in the IN_PROGRESS set `in_progress_key` with `claim` in its hash.
local function claimed_by(in_progress_key, id, claim)
  return redis.call('ZSCORE', in_progress_key, id) and redis.call('HGET', hash_prefix .. id, 'cd') == claim
end

local out, claimed, swept = {}, {}, {}
local taken = 0  -- jobs claimed by this run (the room under the cap is for them)
local a, number = 6, 0
for _ = 1, groups do  -- where the groups end: the tail, if any, starts there
  a = a + 3 + tonumber(ARGV[a + 2])
end
local left = room(rules_tail(a - 1))
a = 6
for _ = 1, groups do
  local k, claim, m = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
  local first = a + 3
  a = first + m
  if not swept[k] then
    sweep_lapsed(KEYS[k], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], now)
    swept[k] = true
    claimed[k] = {}
  end
  local mine = claimed[k]
  for i = first, first + m - 1, 1000 do
    local last = math.min(i + 999, first + m - 1)
    local holders = redis.call('HMGET', KEYS[k + 4], unpack(ARGV, i, last))
    for j = i, last do
      number = number + 1
      local holder = holders[j - i + 1]
      if holder == reservation and taken < left then
        local id = ARGV[j]
        redis.call('HSET', hash_prefix .. id, 'ua', now, 'cd', claim)
        mine[#mine + 1] = id
        out[#out + 1] = number
        taken = taken + 1
      elseif holder ~= reservation and claimed_by(KEYS[k + 1], ARGV[j], claim) then
        out[#out + 1] = number
      end
    end
  end
end
for k, ids in pairs(claimed) do
  drop_holds(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ids)
  zadd_all(KEYS[k + 1], now, ids)
end
return out
