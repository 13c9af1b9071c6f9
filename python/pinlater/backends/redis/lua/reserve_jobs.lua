--[[ reserve_jobs: hold up to ARGV[4] eligible PENDING jobs of one priority for the dequeue
broker until ARGV[6].

A held job moves from its PENDING set to the priority's held set with the same score (its run
after), its expiry goes in the expiry set and the reservation in the holders hash (see
lib/holds.lua); its hash is not touched. Counts, scans and lookups still report it PENDING. Lapsed
holds go back to PENDING first. Eligible: score (run after) <= now, lowest score first (equal
scores in Redis' text order of ids). A member whose hash is gone (evicted) is removed from the
PENDING set, its remains deleted, and counted.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  PENDING sorted set (plq_{shard}_{queue}.p{p}_s0)
KEYS[3]  held sorted set (plq_{shard}_{queue}.p{p}_h)
KEYS[4]  hold expiry sorted set (plq_{shard}_{queue}.p{p}_x)
KEYS[5]  holders hash (plq_{shard}_{queue}.p{p}_o)
KEYS[6]  FAILED sorted set (plq_{shard}_{queue}.p{p}_s3)
KEYS[7]  expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[8]  expired count (pld_{shard}_{queue}.n)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  reservation
ARGV[6]  expiry, seconds as float
ARGV[7]  byte budget, as in dequeue_jobs.lua: a job is held while the bodies held before it
         hold fewer bytes (the first always)
then, only when the queue has max in progress, the rules at the end of ARGV and KEYS
(lib/rules.lua): no more jobs are held than the room under it.

A job whose expiry (ex, ms) is at or before now is expired in place of a job (as
dequeue_jobs.lua does); one that expires at or before ARGV[6] is not held (a broker hands a held
job out before its claim is written): it stays PENDING for direct dequeues, and is skipped, at
most SKIP_BUDGET of them a call (later pages start past the ones skipped).

Hash fields: bd al ar ca ua cs ex (keys.JobField).
Returns {evicted, cut, then 7 values per job: id, run after score, bd, al, ar, ca, ua}, or -1 if
the queue does not exist; cut as in dequeue_jobs.lua (the jobs skipped for expiring within the
hold do not count: a call again would skip them again). The caller orders the jobs by (score,
id).
]]
--@include holds
--@include rules
--@include cut_chars
--@include ended
local names_key, pending_key = KEYS[1], KEYS[2]
local held_key, expiry_key, holders_key = KEYS[3], KEYS[4], KEYS[5]
local failed_key, expiry_index_key, expired_count_key = KEYS[6], KEYS[7], KEYS[8]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local limit, reservation, expiry = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local now_ms, expiry_ms, max_bytes = ms_of(now), ms_of(expiry), tonumber(ARGV[7])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
limit = math.min(limit, room(rules_tail(7)))
local SKIP_BUDGET = 1000
local EXPIRED_BUDGET, expired_met = 256, 0  -- as in dequeue_jobs.lua
local out = {0, 0}
local found, evicted, skipped, ended = 0, 0, 0, false
local spent = 0  -- body bytes held (max_bytes)
while found < limit and skipped < SKIP_BUDGET and expired_met < EXPIRED_BUDGET do
  local want = limit - found
  -- the jobs skipped stay first in the range (they came before every member not yet read)
  local page = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', skipped, want)
  local taken, held, expiries, holders = {}, {}, {}, {}
  local full = false
  for i = 1, #page, 2 do
    if found > 0 and spent >= max_bytes then
      full = true
      break  -- the rest stay PENDING, untouched
    end
    local id, score = page[i], page[i + 1]
    local hash_key = hash_prefix .. id
    local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'ca', 'ua', 'ex')
    if job[1] and job[2] and job[6] and not expired_at(job[6], now_ms) and tonumber(job[6]) <= expiry_ms then
      skipped = skipped + 1
    else
      taken[#taken + 1] = id
    end
    if job[1] and job[2] and job[6] and not expired_at(job[6], now_ms) and tonumber(job[6]) <= expiry_ms then
      -- expires within the hold: left PENDING
    elseif not job[1] or not job[2] then
      redis.call('DEL', hash_key)
      evicted = evicted + 1
    elseif expired_at(job[6], now_ms) then
      expired_met = expired_met + 1
      local status = redis.call('HGET', hash_key, 'cs')
      redis.call('HSET', hash_key, 'ar', 0, 'ua', now, 'cs', ended_status(status, EXPIRED, CUSTOM_STATUS_LIMIT))
      redis.call('ZADD', failed_key, now, id)
      redis.call('ZREM', expiry_index_key, id)
      redis.call('INCR', expired_count_key)
    else
      held[#held + 1] = score
      held[#held + 1] = id
      expiries[#expiries + 1] = expiry
      expiries[#expiries + 1] = id
      holders[#holders + 1] = id
      holders[#holders + 1] = reservation
      out[#out + 1] = id
      out[#out + 1] = score
      out[#out + 1] = job[1]
      out[#out + 1] = job[2]
      out[#out + 1] = job[3]
      out[#out + 1] = job[4]
      out[#out + 1] = job[5]
      found = found + 1
      spent = spent + #job[1]
    end
  end
  zrem_all(pending_key, taken)
  zadd_pairs(held_key, held)
  zadd_pairs(expiry_key, expiries)
  for i = 1, #holders, 2000 do
    redis.call('HSET', holders_key, unpack(holders, i, math.min(i + 1999, #holders)))
  end
  if full or (found > 0 and spent >= max_bytes) then
    break  -- (not ended: the walk stops at its byte budget without taking the place for empty)
  elseif #page < 2 * want then
    ended = true
    break
  end
end
local cut = (not ended and found < limit and expired_met >= EXPIRED_BUDGET) and 1 or 0
out[1], out[2] = evicted, cut
return out
