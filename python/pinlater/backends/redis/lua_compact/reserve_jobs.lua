--[[ reserve_jobs: hold up to ARGV[4] eligible PENDING jobs of one priority for the dequeue
broker until ARGV[6].

As lua/reserve_jobs.lua, in the compact layout. A held job moves from its PENDING set to the
priority's held set with the same score (its run after, ms), its expiry (ms) goes in the expiry
set and the reservation in the holders hash (see lib/holds.lua); its record is not touched.
Counts, scans and lookups still report it PENDING. Lapsed holds go back to PENDING first.
Eligible: score <= now, lowest score first (equal scores in Redis' text order of ids). A member
whose record is missing (evicted) is removed from the PENDING set and counted. PENDING jobs in
the ready list (lib/ready.lua) are merged in by (score, id as a number), as dequeue_jobs.lua
does: the list loses the prefix taken, its tombstones dropped and its evicted entries counted;
a held job from the list goes back to the PENDING set when its hold ends. Per page of members:
one HMGET of their records, one ZREM; per page of the list one LRANGE and one HMGET; one ZADD
per hold structure.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  PENDING sorted set (plc:{S:Q}:p{p}:s0)
KEYS[3]  held sorted set (plc:{S:Q}:p{p}:h)
KEYS[4]  hold expiry sorted set (plc:{S:Q}:p{p}:x)
KEYS[5]  holders hash (plc:{S:Q}:p{p}:o)
KEYS[6]  ready list (plc:{S:Q}:p{p}:r)
KEYS[7]  FAILED sorted set (plc:{S:Q}:p{p}:s3)
KEYS[8]  expiry index (plc:{S:Q}:xe)
KEYS[9]  expired count (plc:{S:Q}:xn)
KEYS[10..]  the dedup records and runs (plc:{S:Q}:dk, :dr; keys_compact.ending_keys): a job met
          expired forgets its dedup key (lib/expiry.lua)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  reservation
ARGV[6]  expiry, seconds as float
ARGV[7]  byte budget, as in dequeue_jobs.lua: a job is held while the bodies held before it
         hold fewer bytes (the first always)
then, only when the queue has a rule for dequeues, the rules and group keys at the end of ARGV
and KEYS (lib/groups.lua's tail): as in dequeue_jobs.lua, no more jobs than the room under max
in progress, and a job of a group without a token is skipped and rescheduled.

A job whose expiry (ex) is at or before now is expired in place of a job (lib/expiry.lua); one
that expires at or before ARGV[6] is not held (as lua/reserve_jobs.lua: it stays PENDING for
direct dequeues), at most SKIP_BUDGET of them skipped a call.

Returns {evicted, cut, then 7 values per job: id, run after (seconds), bd, al, ar, ca, ua
(seconds)}, or -1 if the queue does not exist; cut as in dequeue_jobs.lua (the jobs skipped for
expiring within the hold do not count: a call again would skip them again). The caller orders
the jobs by (score, id).
]]
--@include records
--@include sets
--@include holds
--@include ready
--@include groups
--@include cut_chars
--@include ended
--@include dedup
--@include expiry
--@include order
local failed_key, expiry_index_key, expired_count_key = KEYS[7], KEYS[8], KEYS[9]
local meta_key, pending_key = KEYS[1], KEYS[2]
local held_key, expiry_key, holders_key = KEYS[3], KEYS[4], KEYS[5]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local limit, reservation, expiry = tonumber(ARGV[4]), ARGV[5], to_ms(ARGV[6])
local max_bytes = tonumber(ARGV[7])
local ready_key = KEYS[6]
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
local rules = rules_tail(7)
limit = math.min(limit, room(rules))
if limit <= 0 then
  return {0, 0}
end
local rate_limited = rules and rules.rate > 0
local no_token, skips_spent = token_gate(rules, pending_key, now, rate_limited)
local out = {0, 0}
local found, evicted, cut = 0, 0, 0
local spent = 0  -- body bytes held (max_bytes)
-- How many records to read at once (as in dequeue_jobs.lua): 8 at first, then about as many as
-- the budget leaves room for, at most `most`; no more than a few bodies past it are read.
local function fitting(most)
  if found == 0 then
    return math.min(8, most)
  end
  local room = (max_bytes - spent) * found / math.max(spent, 1)
  return math.max(1, math.min(most, math.floor(room) + 1))
end
local held, mine, holders = {}, {}, {}
local function take(id, score, job)
  spent = spent + #job.bd
  held[#held + 1] = score
  held[#held + 1] = id
  mine[#mine + 1] = id
  holders[#holders + 1] = id
  holders[#holders + 1] = reservation
  local o = 2 + 7 * found
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, to_seconds(score), job.bd, job.al
  out[o + 5], out[o + 6], out[o + 7] = job.ar, to_seconds(job.ca), to_seconds(job.ua)
  found = found + 1
end


-- The PENDING set's side: pages of eligible members with their records; those taken (held or
-- evicted) are removed before the next page is read.
local page, at, more, taken = {}, 1, true, {}
local SKIP_BUDGET, skipped = 1000, 0  -- jobs expiring within the hold: left PENDING, not held
local function next_member()
  if at > #page and more and skipped < SKIP_BUDGET then
    zrem_all(pending_key, taken)
    taken = {}
    local want = fitting(limit - found)  -- (the records of a page are read whole)
    -- the jobs skipped stay first in the range (they came before every member not yet read)
    local flat = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', skipped, want)
    page = {}
    local ids = {}
    for i = 1, #flat, 2 do
      page[#page + 1] = {flat[i], flat[i + 1]}
      ids[#ids + 1] = flat[i]
    end
    more = #page >= want
    at = 1
    local jobs = read_records(records_key, ids)
    for _, entry in ipairs(page) do
      entry[3] = jobs[entry[1]]
    end
    sort_entries(page)  -- by (score, id) as numbers: before()
  end
  return page[at]
end

-- (33 at most, and as many as the byte budget seems to leave room for: 33 records of 16 MiB
-- had been read at once for a budget of 64 MiB)
local reader = ready_reader(ready_key, records_key, true, math.min(limit + 1, 33), nil,
  function() return math.min(fitting(limit + 1), 33) end)
local EXPIRED_BUDGET, expired_met = 256, 0  -- as in dequeue_jobs.lua
while found < limit do
  if found > 0 and spent >= max_bytes then
    break  -- (no cut: the walk stops at its byte budget, and does not take the place for empty)
  end
  local member = next_member()
  local entry = reader.peek()
  if reader.cut then
    cut = 1
    break  -- past READY_SKIP_BUDGET entries that are no jobs: the list's next job may come before any member
  end
  if entry and entry.score > now then
    entry = nil
  end
  if entry and (not member or before({s = entry.score, n = tonumber((entry_id(entry.id)))}, member)) then
    reader.take()
    if entry.job and no_token(entry.id, entry.job) then  -- (out of the list, to the set at its group's next token)
      if skips_spent() then
        break  -- (no cut: the jobs skipped come due again at their group's next token)
      end
    elseif entry.job then
      take(entry.id, string.format('%d', entry.score), entry.job)
    elseif entry.state == 'gone' then
      evicted = evicted + 1
    end
  elseif member then
    at = at + 1
    if member[3] and expired_at(member[3].ex, now) then
      if expire_met(rules, records_key, pending_key, failed_key, expiry_index_key, expired_count_key, member[1],
          member[3], now) then
        taken[#taken + 1] = member[1]
      end
      expired_met = expired_met + 1
      if expired_met >= EXPIRED_BUDGET then  -- the next call, or the monitor's expire_jobs, ends the rest
        cut = 1
        break
      end
    elseif member[3] and member[3].ex and member[3].ex <= expiry then
      skipped = skipped + 1
    elseif member[3] and no_token(member[1], member[3]) then
      if skips_spent() then
        break  -- (no cut: the jobs skipped come due again at their group's next token)
      end
    else
      if member[3] then
        take(member[1], member[2], member[3])
      else
        evicted = evicted + 1
      end
      taken[#taken + 1] = member[1]
    end
  else
    break
  end
end
zrem_all(pending_key, taken)
reader.finish()
zadd_pairs(held_key, held)
zadd_all(expiry_key, expiry, mine)
for i = 1, #holders, 2 * SET_CHUNK do
  redis.call('HSET', holders_key, unpack(holders, i, math.min(i + 2 * SET_CHUNK - 1, #holders)))
end
out[1], out[2] = evicted, cut
return out
