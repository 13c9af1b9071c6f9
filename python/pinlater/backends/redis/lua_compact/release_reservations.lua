--[[ release_reservations: end live holds of ARGV[3] (reserve_jobs.lua), so the jobs are
dequeuable at once: back to their PENDING set with their run-after score. Their records were
never changed by the hold and are not touched. Lapsed holds go back to PENDING first
(lib/holds.lua).

As lua/release_reservations.lua (same ARGV: this script takes no records hash), in the compact
layout, with the holders of each priority's jobs read with one HMGET instead of an HGET each.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2..n]  four per priority named: PENDING set, held set, hold expiry set, holders hash
            (plc:{S:Q}:p{p}:s0, :h, :x, :o)
ARGV[1]     queue name
ARGV[2]     now, seconds as float
ARGV[3]     reservation
ARGV[4]     number of jobs, n
then 2 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id

Returns how many holds were released (a job listed twice counts twice, as in the original), or
-1 if the queue does not exist.
]]
--@include records
--@include sets
--@include holds
local meta_key = KEYS[1]
local now = to_ms(ARGV[2])
local reservation, n = ARGV[3], tonumber(ARGV[4])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
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
  local ids, mine = groups[k], {}
  for i = 1, #ids, SET_CHUNK do
    local last = math.min(i + SET_CHUNK - 1, #ids)
    local holders = redis.call('HMGET', holders_key, unpack(ids, i, last))
    for j = i, last do
      if holders[j - i + 1] == reservation then
        mine[#mine + 1] = ids[j]
      end
    end
  end
  unhold(pending_key, held_key, expiry_key, holders_key, mine)
  released = released + #mine
end
return released
