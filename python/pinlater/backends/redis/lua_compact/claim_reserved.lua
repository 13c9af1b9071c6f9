--[[ claim_reserved: claim jobs the dequeue broker holds (reserve_jobs.lua), exactly as
dequeue_jobs.lua claims, only where the hold is live and ARGV[4]'s: from the held set to the
IN_PROGRESS set scored by now, cd = the job's claim, ua = now. Lapsed holds go back to PENDING
first (lib/holds.lua), so a hold found in the holders hash is live.

As lua/claim_reserved.lua, in the compact layout, with one HMGET and one HSET of records for the
whole call. The jobs come in groups that share a priority and a claim (one worker's dequeue), so
each job costs one argument.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2..n]  five per priority named: PENDING set, IN_PROGRESS set, held set, hold expiry set,
            holders hash (plc:{S:Q}:p{p}:s0, :s1, :h, :x, :o)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, seconds as float
ARGV[4]     reservation
ARGV[5]     number of groups
then per group:
  ARGV[i]   index into KEYS of the PENDING set of the group's priority (the other four follow)
  ARGV[i+1] the group's claim descriptor
  ARGV[i+2] number of jobs in the group, m
  ARGV[i+3..i+2+m] their local ids

Then, only when the queue has max in progress, the rules and group keys at the end of ARGV and
KEYS (lib/groups.lua's tail): no more jobs are claimed than the room under it (the IN_PROGRESS
jobs of every priority); the others stay held until their holds lapse.

A held job whose record is missing (evicted) is still claimed and moved (the original writes a
partial hash there); no record is written for it, so the next script to meet it in IN_PROGRESS
removes it as evicted.

A job no longer held that is IN_PROGRESS under the claim given for it (claims are unique per
dequeue) counts as claimed and is left as it is: this call sent again after its reply was lost
(a connection dropped, Redis restarted), whose first run claimed it. Answered "not claimed", the
broker would withhold it, and the job would run at no worker's hands until its claim timed out
and took an attempt (FAILED, if its last).
Returns the 1-based numbers of the jobs claimed, counting through the groups in order, or -1 if
the queue does not exist.
]]
--@include records
--@include sets
--@include holds
--@include groups
local meta_key = KEYS[1]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local reservation, groups = ARGV[4], tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
-- Whether job `id` is in the IN_PROGRESS set `in_progress_key` with `claim` in its record.
local function claimed_by(in_progress_key, id, claim)
  if not redis.call('ZSCORE', in_progress_key, id) then
    return false
  end
  local packed = redis.call('HGET', records_key, id)
  if not packed or packed == TOMBSTONE then
    return false
  end
  local _, _, _, _, _, _, cd = record_items(packed)
  return cd == claim
end

local out, claimed, swept = {}, {}, {}
local ids, claims = {}, {}  -- every job claimed, in order, and its claim
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
  for i = first, first + m - 1, SET_CHUNK do
    local last = math.min(i + SET_CHUNK - 1, first + m - 1)
    local holders = redis.call('HMGET', KEYS[k + 4], unpack(ARGV, i, last))
    for j = i, last do
      number = number + 1
      local holder = holders[j - i + 1]
      if holder == reservation and #ids < left then
        local id = ARGV[j]
        mine[#mine + 1] = id
        ids[#ids + 1] = id
        claims[#ids] = claim
        out[#out + 1] = number
      elseif holder ~= reservation and claimed_by(KEYS[k + 1], ARGV[j], claim) then
        out[#out + 1] = number
      end
    end
  end
end
-- The records, each once, with the last claim given for it (as the original's last HSET).
local jobs = read_records(records_key, ids)
local unique, seen = {}, {}
for i, id in ipairs(ids) do
  local job = jobs[id]
  if job then
    job.ua, job.cd = now, claims[i]
  end
  if not seen[id] then
    seen[id] = true
    unique[#unique + 1] = id
  end
end
write_records(records_key, unique, jobs)
for k, mine in pairs(claimed) do
  drop_holds(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], mine)
  zadd_skiplist(KEYS[k + 1], #mine, zadd_all, now, mine)
end
return out
