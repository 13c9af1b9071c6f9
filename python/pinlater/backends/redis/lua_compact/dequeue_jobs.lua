--[[ dequeue_jobs: claim up to ARGV[4] eligible PENDING jobs of one priority (or, in a dry run,
only read them).

As lua/dequeue_jobs.lua, in the compact layout. Eligible: score (run after, ms) <= now, lowest
score first. Members with equal scores sort as text in Redis ("10" before "9"), so where the
limit cuts through a group of equal scores the group's numerically lowest ids are taken (first
in, first out within a batch), unless the group holds more than ARGV[7] members, where the text
order is kept to bound the work. A claimed job moves to the IN_PROGRESS set scored by now (the
claim time the claim timeout reads) and its record gets cd = claim and ua = now. A member whose
record is missing (evicted) is removed from the PENDING set and counted, and another job is
taken in its place; a dry run only skips it.

Jobs the dequeue broker holds (reserve_jobs.lua) are out of the PENDING set, so a claim never
meets them; lapsed holds go back to PENDING first (lib/holds.lua). A dry run shows held jobs too,
merged by (score, id): they are PENDING.

PENDING jobs are in the PENDING set or in the ready list (lib/ready.lua), whose entries are in
(score, id) order already: the set's picked members and the list's head are merged by (score, id
as a number) and the first `limit` taken; the list loses the prefix taken (one LTRIM), with its
tombstones (dropped, not counted) and the entries whose record is missing (evicted: counted). So
a group of equal scores that the limit cuts is taken by id as a number wherever it holds list
jobs, even past ARGV[7] (the list's order costs nothing to keep).

Per page of members: one HMGET of their records, one ZREM; per page of the list one LRANGE and
one HMGET; at the end one HSET of the claimed records and one ZADD (per chunk of 1000).

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  PENDING sorted set (plc:{S:Q}:p{p}:s0)
KEYS[3]  IN_PROGRESS sorted set (plc:{S:Q}:p{p}:s1)
KEYS[4]  held sorted set (plc:{S:Q}:p{p}:h)
KEYS[5]  hold expiry sorted set (plc:{S:Q}:p{p}:x)
KEYS[6]  holders hash (plc:{S:Q}:p{p}:o)
KEYS[7]  ready list (plc:{S:Q}:p{p}:r)
KEYS[8]  FAILED sorted set (plc:{S:Q}:p{p}:s3)
KEYS[9]  expiry index (plc:{S:Q}:xe)
KEYS[10] expired count (plc:{S:Q}:xn)
KEYS[11..]  the dedup records and runs (plc:{S:Q}:dk, :dr; keys_compact.ending_keys): a job met
          expired forgets its dedup key (lib/expiry.lua)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  claim descriptor
ARGV[6]  '1' for a dry run, else '0'
ARGV[7]  largest group of equal scores to reorder by id
ARGV[8]  byte budget: a job is taken while the bodies taken before it hold fewer bytes (the
         first always), so one call's reply stays bounded (base.DEQUEUE_BYTES); the jobs taken
         are the first by (score, id), as the limit takes them
then, only when the queue has a rule for dequeues (max in progress, group jobs per second), the
rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail). A claim then takes no
more jobs than the room under max in progress (the IN_PROGRESS jobs of every priority), and a
job of a group whose bucket has no token is skipped, its run after (score) moved to when the
next token is due (at most MAX_RATE_SKIPS per call; a job of the ready list moves to the set);
dry runs ignore both.

A job whose record has an expiry (ex) at or before now is never handed out: a claim expires it
(lib/expiry.lua) in place of a job, a dry run skips it.

Returns {evicted, cut, then 7 values per job: id, run after (seconds), bd, al, ar, ca, ua
(seconds)}, where ua is the new updated time (the old one in a dry run), or -1 if the queue does
not exist. cut is 1 when the call stopped at one of its budgets (EXPIRED_BUDGET expired jobs
met, the ready list's READY_SKIP_BUDGET entries that are no jobs) before its limit, with due jobs
maybe left behind them: the caller calls again rather than taking the place for empty
(ShardedBackend.walk_ready); else 0. MAX_RATE_SKIPS is no cut: the jobs it moved come due
again at their group's next token, so calling again would only move more of them.
The caller orders the jobs by (score, id).
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
local failed_key, expiry_index_key, expired_count_key = KEYS[8], KEYS[9], KEYS[10]
local meta_key, pending_key, in_progress_key = KEYS[1], KEYS[2], KEYS[3]
local held_key, expiry_key, holders_key = KEYS[4], KEYS[5], KEYS[6]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local limit, claim, dry_run = tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
-- the largest group of equal scores to reorder, the byte budget, and the body bytes the general
-- loop took (one local: the script is at Lua's 200 locals)
local limits = {max_ties = tonumber(ARGV[7]), max_bytes = tonumber(ARGV[8]), spent = 0}
-- How many more records to read at once, `taken` jobs holding `spent` bytes so far: 8 at first,
-- then about as many as the budget leaves room for (one more), at most `most`: no more than a
-- few bodies past the budget are ever read, whatever their size.
function limits.fitting(taken, spent, most)
  if taken == 0 then
    return math.min(8, most)
  end
  local room = (limits.max_bytes - spent) * taken / math.max(spent, 1)
  return math.max(1, math.min(most, math.floor(room) + 1))
end
local ready_key = KEYS[7]
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end

-- Every PENDING member scored `last` (a score as Redis answers it), in id order as numbers; nil
-- if there are more than ARGV[7] (the tie fix described above: then Redis' order stands).
local function ties_by_id(last)
  if redis.call('ZCOUNT', pending_key, last, last) > limits.max_ties then
    return nil
  end
  local ties = redis.call('ZRANGEBYSCORE', pending_key, last, last)
  sort_ids(ties)
  return ties
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
  local ties = ties_by_id(last)
  if not ties then
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

-- A dry run: the first `want` eligible jobs of PENDING and the held set together, by (score, id).
local function pick_with_held(want)
  local picked = pick(want)
  local held = redis.call('ZRANGEBYSCORE', held_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
  for i = 1, #held, 2 do
    picked[#picked + 1] = {held[i], held[i + 1]}
  end
  table.sort(picked, function(x, y)
    local sx, sy = tonumber(x[2]), tonumber(y[2])
    if sx ~= sy then
      return sx < sy
    end
    return tonumber(x[1]) < tonumber(y[1])
  end)
  for i = #picked, want + 1, -1 do
    picked[i] = nil
  end
  return picked
end

local rules = rules_tail(8)
if not dry_run then
  sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  limit = math.min(limit, room(rules))
  if limit <= 0 then
    return {0, 0}
  end
end
local rate_limited = rules and rules.rate > 0 and not dry_run
local no_token, skips_spent = token_gate(rules, pending_key, now, rate_limited)

-- The common claims' records and reply: for `ids` (at most RECORD_CHUNK, scored `scores`), the
-- HSET arguments of their claimed records (rewritten from their items without a table:
-- lib/records.lua's bytes, as pack_record makes them) and the reply, or nil where a record is
-- missing, a tombstone or has an expiry, or the byte budget ends before the last job (the
-- general loop then does it, reading its pages as this does: limits.bailed). The records are
-- read 8 first, then as many as the budget seems to leave room for (all the rest, where they
-- seem to fit: two HMGETs for small bodies), so no more than a few bodies past the budget are
-- ever read, whatever their size.
local function claim_rows(ids, scores)
  local out, fields, updated = {0, 0}, {}, to_seconds(now)
  local spent, records, base, next_read = 0, nil, 1, 1
  for i = 1, #ids do
    if i > 1 and spent >= limits.max_bytes then
      limits.bailed = true  -- (the general loop then reads its pages as this does)
      return nil
    end
    if i == next_read then
      local last = math.min(i + limits.fitting(i - 1, spent, RECORD_CHUNK) - 1, #ids)
      records, base, next_read = redis.call('HMGET', records_key, unpack(ids, i, last)), i, last + 1
    end
    local record = records[i - base + 1]
    if not record or record == TOMBSTONE then
      return nil
    end
    local bd, al, ar, ca, _, cs, _, gr, gq, ex, dk = record_items(record)
    if ex then
      return nil
    end
    spent = spent + #bd
    local id = ids[i]
    fields[2 * i - 1], fields[2 * i] = id, record_of(bd, al, ar, ca, now, cs, claim, gr, gq, nil, dk)
    local o = 7 * i - 5
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, to_seconds(scores[i]), bd, al
    out[o + 5], out[o + 6], out[o + 7] = ar, to_seconds(ca), updated
  end
  return out, fields
end

-- The entries taken off the list's head (its first t, of which `markers` markers, the last of
-- them `last_marker`) go, a marker staying in front of the next entry if that is an id.
local function trim_taken(page, t, markers, last_marker)
  local next_entry = page[t + 1]
  if not next_entry then
    next_entry = redis.call('LINDEX', ready_key, t)
  end
  ready_trim(ready_key, records_key, t, next_entry and not is_marker(next_entry) and last_marker, -markers)
end

-- The common claim when the list and the set both hold due jobs (a queue of ordered groups: a job
-- that joins an idle group goes to the list, one moved up in its group to the set), merged by
-- (score, id as a number) as the general loop merges them, but with no table per job: the set's
-- first `limit` due members (`set_page`, with scores), the list's head (one LRANGE), the records
-- of the jobs taken (claim_rows), then one ZREM, LTRIM (and LSET), HSET and ZADD. Where the
-- limit cuts through one score of the set, the page takes that score's lowest ids as numbers, as
-- pick() does. It gives up (nil) before writing anything where the general loop has more to do:
-- such a score holds more than ARGV[7] members, ids of different lengths share another score in
-- the page (text order is not the numbers' order: sort_entries' reorder), the list's page ends
-- while the list may hold more, or an entry claim_rows refuses (a tombstone, a cancelled job's
-- place, an evicted job, one with an expiry).
local function claim_merged(set_page)
  local set_n = #set_page / 2
  if set_n > limit then
    set_n = limit
    local last = set_page[2 * limit]
    if last == set_page[2 * limit + 2] then
      -- the limit cuts through this score: the page takes its lowest ids as numbers, as pick()
      -- does (more than ARGV[7]: the general loop's order)
      local ties = ties_by_id(last)
      if not ties then
        return nil
      end
      local first = limit  -- the page's first member of that score
      while first > 1 and set_page[2 * first - 2] == last do
        first = first - 1
      end
      for i = first, limit do
        set_page[2 * i - 1] = ties[i - first + 1]
      end
    end
  end
  local set_scores, score_of = {}, {}
  for i = 1, set_n do
    local text = set_page[2 * i]
    local s = score_of[text]
    if not s then
      s = tonumber(text)
      score_of[text] = s
    end
    set_scores[i] = s
    if i > 1 and text == set_page[2 * i - 2] and #set_page[2 * i - 1] < #set_page[2 * i - 3] then
      return nil
    end
  end
  local page = redis.call('LRANGE', ready_key, 0, limit + 7)
  local full_page = #page == limit + 8
  local ids, scores = {}, {}
  local si, li, n = 1, 1, 0  -- the next set member, the next list entry, the jobs taken
  local score, seen, seen_last, list_due = nil, 0, nil, true  -- the list's at li: score, markers passed
  local t, markers, last_marker = 0, 0, nil  -- the list's entries taken: as trim_taken wants them
  while n < limit do
    local entry = list_due and page[li]
    while entry and is_marker(entry) do
      local s = marker_score(entry)
      if s > now then
        list_due, entry = false, nil
      else
        score, seen, seen_last, li = s, seen + 1, entry, li + 1
        entry = page[li]
      end
    end
    if list_due and not entry and full_page then
      return nil  -- the list may hold more than this page
    end
    local from_list
    if entry and si <= set_n then
      local s = set_scores[si]
      if score ~= s then
        from_list = score < s
      else
        from_list = tonumber(entry) < tonumber(set_page[2 * si - 1])
      end
    elseif entry then
      from_list = true
    elseif si <= set_n then
      from_list = false
    else
      break
    end
    n = n + 1
    if from_list then
      ids[n], scores[n] = entry, score
      t, markers, last_marker, li = li, seen, seen_last, li + 1
    else
      ids[n], scores[n] = set_page[2 * si - 1], set_scores[si]
      si = si + 1
    end
  end
  local out, fields = claim_rows(ids, scores)
  if not out then
    return nil
  end
  if si > 1 then
    local taken = {}
    for i = 1, si - 1 do
      taken[i] = set_page[2 * i - 1]
    end
    redis.call('ZREM', pending_key, unpack(taken))
  end
  if t > 0 then
    trim_taken(page, t, markers, last_marker)
  end
  redis.call('HSET', records_key, unpack(fields))
  zadd_skiplist(in_progress_key, #ids, zadd_all, now, ids)
  return out
end

-- The common claim from the ready list, as claim_common's from the set: the list's head read with
-- one LRANGE (the jobs and the markers among them), the records with one HMGET, the claimed
-- records with one HSET, the entries taken with one LTRIM (and one LSET, keeping a marker at the
-- head). Where the set holds due jobs too, claim_merged takes both. It gives up (nil) before
-- writing anything wherever the general loop has more to do: a dry run, a group rate, a page
-- above RECORD_CHUNK or beyond the one read, or an entry that is no job (a tombstone, an evicted
-- one) or has an expiry.
local function claim_listed()
  if limit > RECORD_CHUNK then
    return nil
  end
  local set_page = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit + 1)
  if set_page[1] then
    return claim_merged(set_page)
  end
  local page = redis.call('LRANGE', ready_key, 0, limit + 7)
  local ids, scores, markers, last_marker, t = {}, {}, 0, nil, 0
  local score = nil
  for i = 1, #page do
    if #ids >= limit then
      break
    end
    local entry = page[i]
    if is_marker(entry) then
      score = marker_score(entry)
      if score > now then
        break
      end
      markers, last_marker = markers + 1, entry
    else
      local n = #ids + 1
      ids[n], scores[n] = entry, score
    end
    t = i
  end
  if #ids < limit and t == #page and #page == limit + 8 then
    return nil  -- more than this page holds
  end
  if #ids == 0 then
    return {0, 0}
  end
  local out, fields = claim_rows(ids, scores)
  if not out then
    return nil
  end
  trim_taken(page, t, markers, last_marker)
  redis.call('HSET', records_key, unpack(fields))
  zadd_skiplist(in_progress_key, #ids, zadd_all, now, ids)
  return out
end

-- The common claim, with as few Lua operations per job as it takes (each costs Redis' Lua dozens
-- of instructions, a table or a C call thousands): one page of the PENDING set, every picked job
-- claimed (claim_rows). It answers what the general loop below would, in pick order (the
-- caller orders the jobs), and gives up before writing anything (nil) wherever that loop has
-- more to do: a dry run, a group rate, a page above RECORD_CHUNK, or a picked job whose record
-- is missing, a tombstone or has an expiry. A ready list holding jobs: claim_listed instead.
local function claim_common()
  if dry_run or rate_limited then
    return nil
  elseif redis.call('LLEN', ready_key) > 0 then
    return claim_listed()
  end
  local page = pick(limit)
  local n = #page
  if n == 0 then
    return {0, 0}
  elseif n > RECORD_CHUNK then
    return nil
  end
  local ids, scores = {}, {}
  for i = 1, n do
    ids[i], scores[i] = page[i][1], page[i][2]
  end
  local out, fields = claim_rows(ids, scores)
  if not out then
    return nil
  end
  redis.call('ZREM', pending_key, unpack(ids))
  redis.call('HSET', records_key, unpack(fields))
  zadd_skiplist(in_progress_key, #ids, zadd_all, now, ids)
  return out
end

local common = claim_common()
if common then
  return common
end


local out = {0, 0}
local found, evicted, cut = 0, 0, 0
local claimed, jobs_of = {}, {}
local function take(id, score, job)
  limits.spent = limits.spent + #job.bd
  local updated = job.ua
  if not dry_run then
    job.ua, job.cd = now, claim
    claimed[#claimed + 1] = id
    jobs_of[id] = job
    updated = now
  end
  local o = 2 + 7 * found
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, to_seconds(score), job.bd, job.al
  out[o + 5], out[o + 6], out[o + 7] = job.ar, to_seconds(job.ca), to_seconds(updated)
  found = found + 1
end

-- The sorted set's side: pages of picked members in (score, id) order, with their records;
-- those taken (claimed or evicted) are removed before the next page is picked.
-- Expired jobs met (ended, or skipped by a dry run) per call, at most: a queue of a million jobs
-- that expired together costs one call no more than this (the reply's cut says so); the next
-- call, or expire_jobs, ends the rest.
local EXPIRED_BUDGET, expired_met = 256, 0
local EXPIRED_PAGE = 128  -- members a page reads, at least, once the call has met expired jobs
local page, at, more, taken = {}, 1, true, {}
-- The page's entries whose records are read: all at once for a claim (its page is cut to the
-- budget already), as the byte budget allows for a dry run (its page is its whole limit:
-- 1,000 records of 1 MiB had been read at once to hand out 16 of them).
limits.read_to = 0
local function next_member()
  if at > #page and more then
    if dry_run then
      page = pick_with_held(limit)
      more = false
    else
      zrem_all(pending_key, taken)
      taken = {}
      local want = limit - found
      if expired_met > 0 then  -- past expired jobs: pages of EXPIRED_PAGE, each pick()'s tie fix paid once
        want = math.max(want, EXPIRED_PAGE)
      end
      if limits.bailed then  -- (the records of a page are read whole: as the budget seems to allow)
        want = limits.fitting(found, limits.spent, want)
      end
      page = pick(want)
      more = #page >= want
    end
    at = 1
    limits.read_to = 0
    sort_entries(page)  -- by (score, id) as numbers: before()
  end
  if at <= #page and at > limits.read_to then
    local from, n = limits.read_to + 1, #page - limits.read_to
    if dry_run then
      n = limits.fitting(found, limits.spent, n)
    end
    local ids = {}
    for i = from, from + n - 1 do
      ids[#ids + 1] = page[i][1]
    end
    local jobs = read_records(records_key, ids)
    for i = from, from + n - 1 do
      page[i][3] = jobs[page[i][1]]
    end
    limits.read_to = from + n - 1
  end
  return page[at]
end

-- Merge the two sides by (score, id) until `limit` jobs are taken or nothing due is left. A dry
-- run reads `limit` places (an evicted job's included, a tombstone's not), as the original's
-- one page does, and changes nothing.
-- (a dry run reads the list's records as its byte budget allows, as it reads the set's)
local reader = ready_reader(ready_key, records_key, true, limits.bailed and math.min(limit + 1, 9) or limit + 1, nil,
  dry_run and function() return limits.fitting(found, limits.spent, limit + 1) end or nil)
local places = 0
while (dry_run and places or found) < limit do
  if found > 0 and limits.spent >= limits.max_bytes then
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
      take(entry.id, entry.score, entry.job)
    elseif entry.state == 'gone' and not dry_run then
      evicted = evicted + 1
    end
    if entry.state == 'job' or entry.state == 'gone' then
      places = places + 1
    end
  elseif member then
    at = at + 1
    if member[3] and expired_at(member[3].ex, now) then
      if not dry_run and expire_met(rules, records_key, pending_key, failed_key, expiry_index_key, expired_count_key,
          member[1], member[3], now) then
        taken[#taken + 1] = member[1]
        more = more or member[3].gr ~= nil  -- its group's next job may have moved up: look again
      end
      expired_met = expired_met + 1
      if expired_met >= EXPIRED_BUDGET then  -- the next call, or the monitor's expire_jobs, ends the rest
        cut = 1
        break
      end
    elseif member[3] and no_token(member[1], member[3]) then
      if skips_spent() then
        break  -- (no cut: the jobs skipped come due again at their group's next token)
      end
    else
      if member[3] then
        take(member[1], member[2], member[3])
      elseif not dry_run then
        evicted = evicted + 1
      end
      taken[#taken + 1] = member[1]
      places = places + 1
    end
  else
    break
  end
end
if not dry_run then
  zrem_all(pending_key, taken)
  reader.finish()
  write_records(records_key, claimed, jobs_of)
  zadd_skiplist(in_progress_key, #claimed, zadd_all, now, claimed)
end
out[1], out[2] = evicted, cut
return out
