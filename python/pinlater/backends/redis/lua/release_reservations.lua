--[[ release_reservations: end live holds of ARGV[4] (reserve_jobs.lua), so the jobs are
dequeuable at once: back to their PENDING set with their run-after score. Their hashes were never
changed by the hold and are not touched. Lapsed holds go back to PENDING first (lib/holds.lua).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2..n]  four per priority named: PENDING set, held set, hold expiry set, holders hash
            (plq_{shard}_{queue}.p{p}_s0, _h, _x, _o)
ARGV[1]     queue name
ARGV[2]     now, seconds as float
ARGV[3]     reservation
ARGV[4]     number of jobs, n
then 2 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id

Returns how many holds were released, or -1 if the queue does not exist.
]]
--@include holds
local names_key = KEYS[1]
local queue, now = ARGV[1], ARGV[2]
local reservation, n = ARGV[3], tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local groups, order = {}, {}
for j = 0, n - 1 do
  local k = tonumber(ARGV[5 + 2 * j])
  if not groups[k] then
    groups[k] = {}
    order[#order + 1] = k
  end
  table.insert(groups[k], ARGV[6 + 2 * j])
end
local released = 0
for _, k in ipairs(order) do
  local pending_key, held_key, expiry_key, holders_key = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  local mine = {}
  for _, id in ipairs(groups[k]) do
    if redis.call('HGET', holders_key, id) == reservation then
      mine[#mine + 1] = id
    end
  end
  unhold(pending_key, held_key, expiry_key, holders_key, mine)
  released = released + #mine
end
return released
