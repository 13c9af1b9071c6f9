--[[ claim_reserved: claim jobs the dequeue broker holds (reserve_jobs.lua), exactly as
dequeue_jobs.lua claims, only where the hold is live and ARGV[4]'s: from the held set to the
IN_PROGRESS set scored by now, cd = the job's claim, ua = now. Lapsed holds go back to PENDING
first (lib/holds.lua), so a hold found in the holders hash is live.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..n]  five per priority named: PENDING set, IN_PROGRESS set, held set, hold expiry set,
            holders hash (plq_{shard}_{queue}.p{p}_s0, _s1, _h, _x, _o)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float
ARGV[4]     reservation
ARGV[5]     number of jobs, n
then 3 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other four follow)
  ARGV[i+1] local id
  ARGV[i+2] the job's claim descriptor (the broker claims many workers' jobs in one call)

Hash fields: ua cd (keys.JobField). A job whose hash was evicted gets a partial one, which the
next script to meet it removes as evicted.
Returns the 1-based numbers of the jobs claimed, or -1 if the queue does not exist.
]]
--@include holds
local names_key = KEYS[1]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local reservation, n = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
-- The jobs by priority (the index of its PENDING key): their numbers, ids and claims.
local groups, order = {}, {}
for j = 0, n - 1 do
  local k = tonumber(ARGV[6 + 3 * j])
  local group = groups[k]
  if not group then
    group = {numbers = {}, ids = {}, claims = {}}
    groups[k] = group
    order[#order + 1] = k
  end
  group.numbers[#group.numbers + 1] = j + 1
  group.ids[#group.ids + 1] = ARGV[7 + 3 * j]
  group.claims[#group.claims + 1] = ARGV[8 + 3 * j]
end
table.sort(order)
local out = {}
for _, k in ipairs(order) do
  local pending_key, in_progress_key = KEYS[k], KEYS[k + 1]
  local held_key, expiry_key, holders_key = KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  local group, claimed = groups[k], {}
  for i = 1, #group.ids, 1000 do
    local last = math.min(i + 999, #group.ids)
    local holders = redis.call('HMGET', holders_key, unpack(group.ids, i, last))
    for m = i, last do
      if holders[m - i + 1] == reservation then
        local id = group.ids[m]
        redis.call('HSET', hash_prefix .. id, 'ua', now, 'cd', group.claims[m])
        claimed[#claimed + 1] = id
        out[#out + 1] = group.numbers[m]
      end
    end
  end
  drop_holds(held_key, expiry_key, holders_key, claimed)
  zadd_all(in_progress_key, now, claimed)
end
return out
