--[[ dequeue_jobs: claim up to ARGV[4] eligible PENDING jobs of one priority (or, in a dry run,
only read them).

Eligible: score (run after) <= now, lowest score first. Members with equal scores sort as text
in Redis ("10" before "9"), so where the limit cuts through a group of equal scores the group's
numerically lowest ids are taken (first in, first out within a batch), unless the group holds
more than ARGV[7] members, where the text order is kept to bound the work. A claimed job moves to
the IN_PROGRESS set scored by now (the claim time the claim timeout reads) and gets cd = claim and
ua = now. A member whose hash is gone (evicted) is removed from the PENDING set, its remains
deleted, and counted, and another job is taken in its place; a dry run only skips it.

Jobs the dequeue broker holds (reserve_jobs.lua) are out of the PENDING set, so a claim never
meets them; lapsed holds go back to PENDING first (lib/holds.lua). A dry run shows held jobs too,
merged by (score, id): they are PENDING.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  PENDING sorted set (plq_{shard}_{queue}.p{p}_s0)
KEYS[3]  IN_PROGRESS sorted set (plq_{shard}_{queue}.p{p}_s1)
KEYS[4]  held sorted set (plq_{shard}_{queue}.p{p}_h)
KEYS[5]  hold expiry sorted set (plq_{shard}_{queue}.p{p}_x)
KEYS[6]  holders hash (plq_{shard}_{queue}.p{p}_o)
KEYS[7]  FAILED sorted set (plq_{shard}_{queue}.p{p}_s3)
KEYS[8]  expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[9]  expired count (pld_{shard}_{queue}.n)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  claim descriptor
ARGV[6]  '1' for a dry run, else '0'
ARGV[7]  largest group of equal scores to reorder by id
ARGV[8]  byte budget: a job is taken while the bodies taken before it hold fewer bytes (the
         first always), so one call's reply stays bounded (base.DEQUEUE_BYTES), and each body
         is read as its job is taken (none past the budget is). A page where text order is not
         the ids' order (equal scores, ids of different lengths) is put in (score, id as a
         number) order first, so the jobs the budget takes are the first by (score, id).
then, only when the queue has max in progress, the rules at the end of ARGV and KEYS
(lib/rules.lua): a claim takes no more jobs than the room under it; dry runs ignore it.

A PENDING job whose hash has an expiry (field ex, ms) at or before now is never handed out: a
claim expires it (to FAILED scored by now, ar 0, ua now, "expired" appended to cs, out of the
expiry index, the expired count one up) in place of a job; a dry run skips it. A job without ex
costs nothing more than the field in the HMGET.

Hash fields: bd al ar ca ua cd cs ex (keys.JobField).
Returns {evicted, cut, then 7 values per job: id, run after score, bd, al, ar, ca, ua}, where
ua is the new updated time (the old one in a dry run), or -1 if the queue does not exist; cut is
1 when the call stopped at EXPIRED_BUDGET expired jobs met, before its limit, with due jobs maybe
left behind them (the caller calls again rather than taking the place for empty:
ShardedBackend.walk_ready), else 0. The caller orders the jobs by (score, id).
]]
--@include holds
--@include rules
--@include order
--@include cut_chars
--@include ended
local names_key, pending_key, in_progress_key = KEYS[1], KEYS[2], KEYS[3]
local held_key, expiry_key, holders_key = KEYS[4], KEYS[5], KEYS[6]
local failed_key, expiry_index_key, expired_count_key = KEYS[7], KEYS[8], KEYS[9]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local now_ms = ms_of(now)
local limit, claim, dry_run = tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
local max_ties, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end

-- The first `want` eligible members as {id, score} pairs, with the tie fix described above. One
-- member more than needed is read to see whether the limit cuts through equal scores at all.
local function pick(want)
  local page = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want + 1)
  local picked = {}
  local cut = #page > 2 * want and page[2 * want] == page[2 * want + 2]
  local last = page[2 * want]
  for i = 1, math.min(#page, 2 * want), 2 do
    if not cut or page[i + 1] ~= last then
      picked[#picked + 1] = {page[i], page[i + 1]}
    end
  end
  if not cut then
    return picked
  end
  local ties
  if redis.call('ZCOUNT', pending_key, last, last) <= max_ties then
    ties = redis.call('ZRANGEBYSCORE', pending_key, last, last)
    sort_ids(ties)
  else
    ties = {}
    for i = 1, 2 * want, 2 do
      if page[i + 1] == last then
        ties[#ties + 1] = page[i]
      end
    end
  end
  for _, id in ipairs(ties) do
    if #picked >= want then
      break
    end
    picked[#picked + 1] = {id, last}
  end
  return picked
end

-- {id, score} pairs in (score, id as a number) order.
local function by_score_and_id(x, y)
  local sx, sy = tonumber(x[2]), tonumber(y[2])
  if sx ~= sy then
    return sx < sy
  end
  return tonumber(x[1]) < tonumber(y[1])
end

-- A dry run: the first `want` eligible jobs of PENDING and the held set together, by (score, id).
local function pick_with_held(want)
  local picked = pick(want)
  local held = redis.call('ZRANGEBYSCORE', held_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
  for i = 1, #held, 2 do
    picked[#picked + 1] = {held[i], held[i + 1]}
  end
  table.sort(picked, by_score_and_id)
  for i = #picked, want + 1, -1 do
    picked[i] = nil
  end
  return picked
end

if not dry_run then
  sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  limit = math.min(limit, room(rules_tail(8)))
end

local out = {0, 0}
local found, evicted, cut = 0, 0, 0
-- Expired jobs met (ended, or skipped by a dry run) per call: once this many, no further page is
-- read, so a queue of a million jobs that expired together costs one call about this much;
-- the next call, or expire_jobs, ends the rest.
local EXPIRED_BUDGET, expired_met = 256, 0
local spent = 0  -- body bytes taken (max_bytes)
while found < limit do
  local want = limit - found  -- (no more: the page is claimed in its order, fixed by pick() only at its end)
  local picked
  if dry_run then
    picked = pick_with_held(want)
  else
    picked = pick(want)
  end
  local taken, claimed = {}, {}
  if not dry_run then  -- (a dry run's page is in that order already: pick_with_held)
    local mixed = false
    for i = 2, #picked do
      if picked[i][2] == picked[i - 1][2] and #picked[i][1] ~= #picked[i - 1][1] then
        mixed = true
        break
      end
    end
    if mixed then  -- equal scores whose text order is not the ids' (the budget may stop in them)
      table.sort(picked, by_score_and_id)
    end
  end
  for _, entry in ipairs(picked) do
    if found > 0 and spent >= max_bytes then
      break  -- the rest stay PENDING, untouched (their bodies unread)
    end
    local id, score = entry[1], entry[2]
    local hash_key = hash_prefix .. id
    local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'ca', 'ua', 'ex')
    taken[#taken + 1] = id
    if not job[1] or not job[2] then
      if not dry_run then
        redis.call('DEL', hash_key)
        evicted = evicted + 1
      end
    elseif expired_at(job[6], now_ms) then
      expired_met = expired_met + 1
      if not dry_run then
        local status = redis.call('HGET', hash_key, 'cs')
        redis.call('HSET', hash_key, 'ar', 0, 'ua', now, 'cs', ended_status(status, EXPIRED, CUSTOM_STATUS_LIMIT))
        redis.call('ZADD', failed_key, now, id)
        redis.call('ZREM', expiry_index_key, id)
        redis.call('INCR', expired_count_key)
      end
    else
      local updated = job[5]
      if not dry_run then
        redis.call('HSET', hash_key, 'ua', now, 'cd', claim)
        claimed[#claimed + 1] = id
        updated = now
      end
      out[#out + 1] = id
      out[#out + 1] = score
      out[#out + 1] = job[1]
      out[#out + 1] = job[2]
      out[#out + 1] = job[3]
      out[#out + 1] = job[4]
      out[#out + 1] = updated
      found = found + 1
      spent = spent + #job[1]
    end
  end
  -- a dry run removes nothing, so another page would repeat this one
  if dry_run then
    break
  end
  zrem_all(pending_key, taken)
  zadd_all(in_progress_key, now, claimed)
  if #picked < want or (found > 0 and spent >= max_bytes) then
    break
  elseif found < limit and expired_met >= EXPIRED_BUDGET then
    cut = 1
    break
  end
end
out[1], out[2] = evicted, cut
return out
