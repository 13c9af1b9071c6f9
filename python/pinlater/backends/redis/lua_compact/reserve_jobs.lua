--[[ reserve_jobs: hold up to ARGV[4] eligible PENDING jobs of one priority for the dequeue
broker until ARGV[6].

As lua/reserve_jobs.lua, in the compact layout. A held job moves from its PENDING set to the
priority's held set with the same score (its run after, ms), its expiry (ms) goes in the expiry
set and the reservation in the holders hash (see lib/holds.lua); its record is not touched.
Counts, scans and lookups still report it PENDING. Lapsed holds go back to PENDING first.
Eligible: score <= now, lowest score first (equal scores in Redis' text order of ids). A member
whose record is missing (evicted) is removed from the PENDING set and counted. Per page of
members: one HMGET of their records, one ZREM, one ZADD per hold structure.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  PENDING sorted set (plc:{S:Q}:p{p}:s0)
KEYS[3]  held sorted set (plc:{S:Q}:p{p}:h)
KEYS[4]  hold expiry sorted set (plc:{S:Q}:p{p}:x)
KEYS[5]  holders hash (plc:{S:Q}:p{p}:o)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  reservation
ARGV[6]  expiry, seconds as float

Returns {evicted, then 7 values per job: id, run after (seconds), bd, al, ar, ca, ua (seconds)},
or -1 if the queue does not exist. The caller orders the jobs by (score, id).
]]
--@include records
--@include sets
--@include holds
local meta_key, pending_key = KEYS[1], KEYS[2]
local held_key, expiry_key, holders_key = KEYS[3], KEYS[4], KEYS[5]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local limit, reservation, expiry = tonumber(ARGV[4]), ARGV[5], to_ms(ARGV[6])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
local out = {0}
local found, evicted = 0, 0
while found < limit do
  local want = limit - found
  local page = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
  local taken = {}
  for i = 1, #page, 2 do
    taken[#taken + 1] = page[i]
  end
  local jobs = read_records(records_key, taken)
  local held, mine, holders = {}, {}, {}
  for i = 1, #page, 2 do
    local id, score = page[i], page[i + 1]
    local job = jobs[id]
    if not job then
      evicted = evicted + 1
    else
      held[#held + 1] = score
      held[#held + 1] = id
      mine[#mine + 1] = id
      holders[#holders + 1] = id
      holders[#holders + 1] = reservation
      local o = 1 + 7 * found
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, to_seconds(score), job.bd, job.al
      out[o + 5], out[o + 6], out[o + 7] = job.ar, to_seconds(job.ca), to_seconds(job.ua)
      found = found + 1
    end
  end
  zrem_all(pending_key, taken)
  zadd_pairs(held_key, held)
  zadd_all(expiry_key, expiry, mine)
  for i = 1, #holders, 2 * SET_CHUNK do
    redis.call('HSET', holders_key, unpack(holders, i, math.min(i + 2 * SET_CHUNK - 1, #holders)))
  end
  if #page < 2 * want then
    break
  end
end
out[1] = evicted
return out
