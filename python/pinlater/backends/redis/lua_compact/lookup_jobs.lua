--[[ lookup_jobs: find jobs by (priority, local id) and read them.

As lua/lookup_jobs.lua, in the compact layout. A job's state is the first of its priority's sets
that holds it (PENDING, IN_PROGRESS, SUCCEEDED, FAILED, then the held set, whose jobs are PENDING:
see lib/holds.lua); its score is the time that state keeps (run after, claim time or finish
time). A job in no set whose record has no claim is PENDING in a ready list (lib/ready.lua),
scored by its ca, if its priority's list holds it, and one whose record is missing is evicted
if the list holds it: made a tombstone and counted (ready_find: a search by halving, log2 of the
list's length in LINDEX probes). Other jobs in no set are left out. A member whose record is missing (evicted) is removed from its
set and counted, and left out (an evicted held job is left to its holder's claim or the sweep).

Batched: one ZMSCORE per set of each priority looked up, one HMGET of the records (one more for
the ids in no set, and a search of the list for each of those without a claim or a record), one
ZREM per set with evicted members.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     the queue's dedup ids hash (plc:{S:Q}:di: id -> dedup key, keys_compact.py)
KEYS[3..n]  seven keys per priority looked up: the four sorted sets in state order, the held set,
            the ready list, then the waiting set (plc:{S:Q}:p{p}:s0 .. :s3, plc:{S:Q}:p{p}:h,
            plc:{S:Q}:p{p}:r, plc:{S:Q}:p{p}:w, whose jobs of ordered groups are PENDING too)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     '1' to include bodies, else '0'
ARGV[4]     number of lookups, n
then 2 per lookup:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other six follow)
  ARGV[i+1] local id
ARGV[5+2n]  with bodies: the most bytes their records may hold ('' or absent: no limit)

Returns {evicted, then 13 values per job found: lookup number (1-based), state (0..3), score
(seconds), al, ar, cs, ca, ua (seconds), cd (nil if none), bd (nil unless asked), its group (nil
if none), its expiry (ms; nil if none), dedup key (nil if none; one HMGET of the ids hash for all)}, or -1 if the
queue does not exist.
]]
--@include keyed_rows
--@include records
--@include sets
--@include ready
local meta_key, ids_key = KEYS[1], KEYS[2]
local records_key, with_body, n = ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end

-- The scores of the ids in each of the six sets of each priority: scores[k + set][id] (set 5
-- is the waiting set, KEYS[k + 6], after the ready list).
local function set_index(k, set)
  if set == 5 then
    return k + 6
  end
  return k + set
end
local ids_of, order = {}, {}
for j = 0, n - 1 do
  local k = tonumber(ARGV[5 + 2 * j])
  if not ids_of[k] then
    ids_of[k] = {}
    order[#order + 1] = k
  end
  table.insert(ids_of[k], ARGV[6 + 2 * j])
end
local scores, found, seen = {}, {}, {}
for _, k in ipairs(order) do
  for set = 0, 5 do
    scores[set_index(k, set)] = scores_of(KEYS[set_index(k, set)], ids_of[k])
    for id in pairs(scores[set_index(k, set)]) do
      if not seen[id] then
        seen[id] = true
        found[#found + 1] = id
      end
    end
  end
end
-- the ids in no set: PENDING in a ready list if their record says so and the list holds them
local unplaced, unplaced_of, in_sets = {}, {}, {}
for _, id in ipairs(found) do
  in_sets[id] = true
end
for j = 0, n - 1 do
  local id = ARGV[6 + 2 * j]
  if not seen[id] then
    seen[id] = true
    unplaced[#unplaced + 1] = id
  end
end
-- With bodies and a budget: the records' lengths first, and none read past it.
local budget = with_body and tonumber(ARGV[5 + 2 * n] or '')
if budget then
  local held = 0
  for _, ids in ipairs({found, unplaced}) do
    for _, id in ipairs(ids) do
      held = held + redis.call('HSTRLEN', records_key, id)
      if held > budget then
        return {-2, held}
      end
    end
  end
end
local jobs = read_records(records_key, found)
local listed, buried = read_records(records_key, unplaced)
local in_list = {}  -- per priority (KEYS index of its PENDING set): id -> true
for j = 0, n - 1 do
  local k, id = tonumber(ARGV[5 + 2 * j]), ARGV[6 + 2 * j]
  local job = listed[id]
  -- unclaimed, or missing (an evicted list entry, as an evicted set member is counted): looked
  -- for in the list (ready_members: a search by halving)
  if (job and job.cd == false) or (not job and not buried[id] and not in_sets[id]) then
    unplaced_of[k] = unplaced_of[k] or {}
    table.insert(unplaced_of[k], id)
  end
end
for k, ids in pairs(unplaced_of) do
  in_list[k] = ready_members(KEYS[k + 5], ids)
end

local writes = set_writes()
local out = {0}
local rows = {}
local evicted = 0
local forgotten = {}  -- per priority: evicted list entries met
for j = 0, n - 1 do
  local k = tonumber(ARGV[5 + 2 * j])
  local id = ARGV[6 + 2 * j]
  for set = 0, 5 do
    local score = scores[set_index(k, set)][id]
    local state = set < 4 and set or 0  -- the held (4) and waiting (5) sets are PENDING (0)
    if score then
      local job = jobs[id]
      if not job then
        if set ~= 4 then
          scores[set_index(k, set)][id] = nil  -- removed: a second lookup of it looks further, as after a ZREM
          writes.remove(set_index(k, set), id)
          evicted = evicted + 1
        end
      else
        local body = false
        if with_body then
          body = job.bd
        end
        rows[#rows + 1] = {j + 1, state, to_seconds(score), job.al, job.ar, job.cs, to_seconds(job.ca),
          to_seconds(job.ua), job.cd, body, job.gr or false, job.ex or false, id, job.dk or false}
      end
      break
    end
  end
  local job = listed[id]
  if not job and in_list[k] and in_list[k][id] then
    in_list[k][id] = nil  -- a tombstone now: a second lookup of it finds nothing, as after a ZREM
    forgotten[k] = forgotten[k] or {}
    table.insert(forgotten[k], id)
    evicted = evicted + 1
  elseif job and job.cd == false and in_list[k][id] then
    local body = false
    if with_body then
      body = job.bd
    end
    rows[#rows + 1] = {j + 1, 0, to_seconds(job.ca), job.al, job.ar, job.cs, to_seconds(job.ca),
      to_seconds(job.ua), false, body, job.gr or false, job.ex or false, id, job.dk or false}
  end
end
writes.flush()
for k, ids in pairs(forgotten) do
  ready_bury(KEYS[k + 5], records_key, ids)
end
emit_keyed_rows(out, rows, 12, 13, ids_key, 14)
out[1] = evicted
return out
