--[[ delete_jobs: delete up to ARGV[5] jobs of one set within a score range (lowest first), or
exactly the listed ids that are still in the set (the store's body-regex path picks them); for
PENDING, the jobs the dequeue broker holds (lib/holds.lua) too, which are PENDING as well.

As lua/delete_jobs.lua, in the compact layout: the bounds, in seconds, are converted to the sets'
millisecond scores; membership of listed ids is read with one ZMSCORE per set, and the jobs go
with one ZREM per set, one drop_holds and one HDEL of records (per chunk of 1000). A job of the
ready list (lib/ready.lua) at the list's head (after nothing but tombstones and dead entries, or
other jobs deleted) is dropped from it, with those entries; another is deleted in place: its
record becomes a tombstone, counted in the records hash's t{p}, until a reader of the list's
head meets it; a listed id in no
set whose record has no claim is the list's if a search of the list finds it (ready_find: log2
of its length in LINDEX probes); a range reads the list from the first entry within the bounds.

Jobs of ordered groups (lib/groups.lua): PENDING includes the waiting jobs (the waiting set);
a deleted waiting job leaves its group's FIFO, and a deleted active one (PENDING or IN_PROGRESS)
leaves its group, whose oldest waiting jobs move up. A deleted PENDING or IN_PROGRESS job with a
dedup key forgets it (lib/dedup.lua, forget_keys).

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  the sorted set to delete from (plc:{S:Q}:p{p}:s{s})
KEYS[3]  for PENDING only, with KEYS[4] to KEYS[7]: the held set, hold expiry set, holders hash,
         ready list and waiting set (plc:{S:Q}:p{p}:h, :x, :o, :r, :w)
KEYS[..]  then the dedup records and runs (plc:{S:Q}:dk, :dr; keys_compact.dedup_end_keys)
then the group keys (lib/groups.lua's tail)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  lowest score, seconds (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  limit
ARGV[6]  the state of KEYS[2] (0 to 3)
ARGV[7..10] the rules (lib/groups.lua's tail)
ARGV[11] the priority (of KEYS[2])
ARGV[12] now, ms (when a group's bucket is full again)
ARGV[13..] local ids to delete instead of a range (optional)

Returns how many jobs were deleted, or -1 if the queue does not exist.
]]
--@include records
--@include sets
--@include holds
--@include ready
--@include groups
--@include dedup
local FIRST_LISTED = 13
local meta_key, set_key = KEYS[1], KEYS[2]
local state = tonumber(ARGV[6])
local held_key, expiry_key, holders_key, ready_key, waiting_key
if state == 0 then
  held_key, expiry_key, holders_key, ready_key, waiting_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
end
local rules = rules_tail(6)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
local records_key, low, high, limit = ARGV[2], bound_ms(ARGV[3]), bound_ms(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local priority, now = tonumber(ARGV[11]), tonumber(ARGV[12])

local from_set, from_held, from_list, from_waiting = {}, {}, {}, {}  -- the ids to delete, by where they are

-- Delete the chosen jobs: out of their sets, then their records; the list's become tombstones.
-- The groups of the jobs deleted hear of it (lib/groups.lua): the waiting ones first, so that
-- none of them is moved up by an active one's leaving.
local function delete_chosen()
  local active = {}  -- their groups and dedup keys hear of it
  if state <= 1 then
    for _, ids in ipairs({from_set, from_held, from_waiting, from_list}) do
      for _, id in ipairs(ids) do
        active[#active + 1] = id
      end
    end
  end
  local jobs = read_records(records_key, active)
  local ended = new_ended()
  for _, id in ipairs(active) do
    local job = jobs[id]
    if job and job.dk then
      ended.add(id, job.dk, job.ca)
    end
  end
  ended.forget(dedup_records_key, dedup_runs_key, now)
  zrem_all(set_key, from_set)
  if #from_held > 0 then
    drop_holds(held_key, expiry_key, holders_key, from_held)
  end
  zrem_all(waiting_key or set_key, from_waiting)
  delete_records(records_key, from_set)
  delete_records(records_key, from_held)
  delete_records(records_key, from_waiting)
  if ready_key and #from_list > 0 then
    local rest, dropped = ready_drop_head(ready_key, records_key, from_list)
    delete_records(records_key, dropped)
    ready_bury(ready_key, records_key, rest)
  end
  for _, id in ipairs(from_waiting) do
    local job = jobs[id]
    if job and job.gr then
      drop_waiting(rules, job.gr, job, id, priority, now)
    end
  end
  for _, ids in ipairs({from_set, from_held, from_list}) do
    for _, id in ipairs(ids) do
      local job = jobs[id]
      if job and job.gr then
        leave_group(rules, job.gr, now)
      end
    end
  end
  return #from_set + #from_held + #from_list + #from_waiting
end

if #ARGV >= FIRST_LISTED then
  local listed = {}
  for i = FIRST_LISTED, #ARGV do
    listed[#listed + 1] = ARGV[i]
  end
  local in_set = scores_of(set_key, listed)
  local in_held, in_list, in_waiting = {}, {}, {}
  if held_key then
    in_held = scores_of(held_key, listed)
    in_waiting = scores_of(waiting_key, listed)
  end
  if ready_key then
    local rest = {}
    for _, id in ipairs(listed) do
      if not in_set[id] and not in_held[id] and not in_waiting[id] then
        rest[#rest + 1] = id
      end
    end
    local jobs = read_records(records_key, rest)
    local unclaimed = {}
    for _, id in ipairs(rest) do
      if jobs[id] and jobs[id].cd == false then
        unclaimed[#unclaimed + 1] = id
      end
    end
    in_list = ready_members(ready_key, unclaimed)  -- a search by halving each
  end
  for _, id in ipairs(listed) do
    if #from_set + #from_held + #from_list + #from_waiting >= limit then
      break
    end
    if in_set[id] then
      in_set[id] = nil
      from_set[#from_set + 1] = id
    elseif in_held[id] then
      in_held[id] = nil
      from_held[#from_held + 1] = id
    elseif in_waiting[id] then
      in_waiting[id] = nil
      from_waiting[#from_waiting + 1] = id
    elseif in_list[id] then
      in_list[id] = nil
      from_list[#from_list + 1] = id
    end
  end
  return delete_chosen()
end
if limit <= 0 then
  return 0
end
local page = redis.call('ZRANGEBYSCORE', set_key, low, high, 'WITHSCORES', 'LIMIT', 0, limit)
local held = {}
if held_key then
  held = redis.call('ZRANGEBYSCORE', held_key, low, high, 'WITHSCORES', 'LIMIT', 0, limit)
end
-- lowest scores of the two together (ties by id as text, as Redis orders)
local both = {}
for i = 1, #page, 2 do
  both[#both + 1] = {page[i], tonumber(page[i + 1]), false}
end
for i = 1, #held, 2 do
  both[#both + 1] = {held[i], tonumber(held[i + 1]), true}
end
local waiting = {}
if waiting_key then
  waiting = redis.call('ZRANGEBYSCORE', waiting_key, low, high, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #waiting, 2 do
    both[#both + 1] = {waiting[i], tonumber(waiting[i + 1]), 'wait'}
  end
end
local listed = {}
if ready_key then
  listed = ready_range(ready_key, records_key, low, high, limit)
  for _, m in ipairs(listed) do
    both[#both + 1] = {m[1], m[2], 'list'}
  end
end
if #held > 0 or #listed > 0 or #waiting > 0 then
  table.sort(both, function(x, y)
    if x[2] ~= y[2] then
      return x[2] < y[2]
    end
    return x[1] < y[1]
  end)
end
for i = 1, math.min(limit, #both) do
  if both[i][3] == 'list' then
    from_list[#from_list + 1] = both[i][1]
  elseif both[i][3] == 'wait' then
    from_waiting[#from_waiting + 1] = both[i][1]
  elseif both[i][3] then
    from_held[#from_held + 1] = both[i][1]
  else
    from_set[#from_set + 1] = both[i][1]
  end
end
return delete_chosen()
