--[[ scan_jobs: read up to ARGV[6] jobs of one set within a score range, from an offset; for
PENDING, merged with the jobs the dequeue broker holds (lib/holds.lua), which are PENDING too.
With bodies and a byte budget (ARGV[9]), the page stops early once the bodies taken reach it, so
it holds at most the budget plus one body, and always at least one member.

As lua/scan_jobs.lua, in the compact layout: the bounds, in seconds, are converted to the sets'
millisecond scores, and scores and times in the reply are seconds again. Records are read with
one HMGET per chunk of the window (with a byte budget, chunks sized by the bodies seen so far,
so little more than the budget is read), evicted members removed with one ZREM (and one
drop_holds for held ones).

Also the candidate reader for body-regex filters, which cannot run in Lua (it has no regular
expressions): the store pages through with bodies and matches in Python. A member whose record is
missing (evicted) is removed from its set, counted, and skipped; `looked` (members of the window
read, evicted ones included) tells the caller how far the offset moved, and `last` whether the
range ends within them. Order: by score, equal scores by id as text (Redis' order), reversed when
newest first; the held set's members and the ready list's entries (lib/ready.lua) take their
places in that order. A tombstone of the list keeps its place: counted in `looked`, no row. An
evicted list entry becomes a tombstone (lib/ready.lua's ready_bury). Reading the
list's part of a window costs O(offset + count) entries, from the head (oldest first) or the
tail (newest first).

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  the queue's dedup ids hash (plc:{S:Q}:di: id -> dedup key, keys_compact.py)
KEYS[3]  the sorted set to read (plc:{S:Q}:p{p}:s{s})
KEYS[4]  optional, with KEYS[5] and KEYS[6]: the held set, hold expiry set and holders hash to
         merge (plc:{S:Q}:p{p}:h, :x, :o)
KEYS[7]  optional, with them: the ready list to merge (plc:{S:Q}:p{p}:r)
KEYS[8]  optional, with them: the waiting set to merge (plc:{S:Q}:p{p}:w: jobs of ordered groups
         waiting behind the active ones, PENDING too; lib/groups.lua), as the held set is
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  lowest score, seconds (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  offset (in members of the range, after earlier evictions were removed)
ARGV[6]  count
ARGV[7]  '1' to include bodies, else '0'
ARGV[8]  '1' for highest score first, else '0'
ARGV[9]  optional: with bodies, stop once the bodies taken reach this many bytes ('0' or none:
         no bound)
ARGV[10] optional, newest first only: a point (score, seconds) to page from instead of the
         offset, as in lua/scan_jobs.lua (lib/after.lua for the sets; in the ready list the
         point is found by halving: lib/ready.lua's ready_back)
ARGV[11] with ARGV[10]: the point's id

Returns {evicted, looked, last (1 if no member of the range follows the ones looked at, else 0),
then 12 values per job: id, score (seconds), al, ar, cs, ca, ua (seconds), cd (nil if none),
bd (nil unless asked), its group (nil if none), its expiry (ms; nil if none), its dedup key (nil
if none)}, or -1 if the queue does not exist. From a point, the score (seconds) and id of the
last member looked at follow the rows, as in lua/scan_jobs.lua.
]]
--@include keyed_rows
--@include records
--@include sets
--@include holds
--@include ready
--@include after
local meta_key, ids_key, set_key = KEYS[1], KEYS[2], KEYS[3]
local held_key, expiry_key, holders_key = KEYS[4], KEYS[5], KEYS[6]
local records_key, low, high = ARGV[2], bound_ms(ARGV[3]), bound_ms(ARGV[4])
local offset, count = tonumber(ARGV[5]), tonumber(ARGV[6])
local with_body, newest_first = ARGV[7] == '1', ARGV[8] == '1'
local ready_key, waiting_key = KEYS[7], KEYS[8]
local point_score, point_id = ARGV[10], ARGV[11]
local from_point = point_score ~= nil
if point_score == '' then
  point_score = nil
end
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end

-- Members [from, from + n) of a set's range in scan order, as {id, score} pairs.
local function range(key, from, n)
  local page
  if newest_first then
    page = redis.call('ZREVRANGEBYSCORE', key, high, low, 'WITHSCORES', 'LIMIT', from, n)
  else
    page = redis.call('ZRANGEBYSCORE', key, low, high, 'WITHSCORES', 'LIMIT', from, n)
  end
  local out = {}
  for i = 1, #page, 2 do
    out[#out + 1] = {page[i], page[i + 1]}
  end
  return out
end

-- Whether a comes before b in scan order (ids are unique across the two sets).
local function before(a, b)
  local sa, sb = tonumber(a[2]), tonumber(b[2])
  if sa ~= sb then
    return (sa < sb) ~= newest_first
  end
  return (a[1] < b[1]) ~= newest_first
end

-- The window [offset, offset + count) of the range: {id, score, where} triples, in order, where
-- is false for the set, 'held' or 'list'.
local window = {}
local more = false  -- from a point: whether a source may hold members past the window

if from_point then
  -- The `count` newest after the point of each source, merged: the window's are among them.
  local point_ms = point_score and to_ms(point_score)
  local at = point_ms and string.format('%.17g', point_ms)
  local merged = {}
  local sources = {{set_key, false}}
  if held_key then
    sources[#sources + 1] = {held_key, 'held'}
  end
  if waiting_key then
    sources[#sources + 1] = {waiting_key, 'wait'}
  end
  for _, source in ipairs(sources) do
    local got = newest_after(source[1], low, high, at, point_id, count)
    more = more or #got >= count
    for _, m in ipairs(got) do
      merged[#merged + 1] = {m[1], m[2], source[2]}
    end
  end
  if ready_key then
    local got = ready_key and ready_back(ready_key, records_key, low, high, count, point_ms, point_id) or {}
    more = more or #got >= count
    for _, m in ipairs(got) do
      merged[#merged + 1] = {m[1], m[2], 'list'}
    end
  end
  table.sort(merged, newer)
  for i = 1, math.min(count, #merged) do
    window[i] = merged[i]
  end
  more = more or #merged > count
elseif not held_key then
  for _, m in ipairs(range(set_key, offset, count)) do
    window[#window + 1] = {m[1], m[2], false}
  end
else
  -- The held set's and the list's members in the window are among their first offset + count
  -- (merged: `others`); set members among those from offset - #others. One set member more is
  -- read (at `base`) to place the others before it.
  local others = {}
  for _, m in ipairs(range(held_key, 0, offset + count)) do
    others[#others + 1] = {m[1], m[2], 'held'}
  end
  if waiting_key then
    for _, m in ipairs(range(waiting_key, 0, offset + count)) do
      others[#others + 1] = {m[1], m[2], 'wait'}
    end
  end
  if ready_key or waiting_key then
    for _, m in ipairs(ready_scan(ready_key, records_key, low, high, offset + count, newest_first)) do
      others[#others + 1] = {m[1], m[2], 'list'}
    end
    -- a strict order for table.sort: `before` says true of a member and itself when newest first
    table.sort(others, function(a, b) return a[1] ~= b[1] and before(a, b) end)
    for i = #others, offset + count + 1, -1 do
      others[i] = nil
    end
  end
  local base = math.max(0, offset - #others - 1)
  local main = range(set_key, base, offset + count - base)
  local placed = {}
  local p = 1
  for i, m in ipairs(main) do
    while p <= #others and before(others[p], m) do
      p = p + 1
    end
    placed[#placed + 1] = {base + (i - 1) + (p - 1), m[1], m[2], false}
  end
  p = 1
  for j, h in ipairs(others) do
    while p <= #main and before(main[p], h) do
      p = p + 1
    end
    -- before the first set member read, past `base`: the window starts later
    if base == 0 or p > 1 then
      placed[#placed + 1] = {(j - 1) + base + (p - 1), h[1], h[2], h[3]}
    end
  end
  table.sort(placed, function(x, y) return x[1] < y[1] end)
  for _, e in ipairs(placed) do
    if e[1] >= offset and e[1] < offset + count then
      window[#window + 1] = {e[2], e[3], e[4]}
    end
  end
end


local budget = tonumber(ARGV[9]) or 0
local rows = {}
local bounded = with_body and budget > 0
local out = {0, 0, 0}
local evicted, looked, taken = 0, 0, 0
local gone, gone_held, gone_listed, gone_waiting = {}, {}, {}, {}
-- Records are read a chunk of the window at a time, sized from the bodies read so far (8 to
-- start with) to hold about the bytes left of the budget, or CHUNK_BYTES without one, so that a
-- window of large bodies never sits in memory whole.
local CHUNK_BYTES = 4 * 1024 * 1024
local at, read, read_bytes = 1, 0, 0  -- the next member whose record is not read; the reads so far
local jobs, tombstones = {}, {}
for i, m in ipairs(window) do
  if bounded and taken >= budget then
    break
  end
  if i == at then
    local n = 8
    if read > 0 then
      local want = CHUNK_BYTES
      if bounded then
        want = budget - taken
      end
      n = math.ceil(want * read / math.max(read_bytes, 1))
    end
    local ids = {}
    for w = at, math.min(at + math.max(1, math.min(n, RECORD_CHUNK)) - 1, #window) do
      ids[#ids + 1] = window[w][1]
    end
    jobs, tombstones = read_records(records_key, ids)
    for _, job in pairs(jobs) do
      read_bytes = read_bytes + #job.bd
    end
    read = read + #ids
    at = at + #ids
  end
  looked = looked + 1
  local id, score, where = m[1], m[2], m[3]
  local job = jobs[id]
  if tombstones[id] then
    -- a job of the list deleted in place: its place, no row
  elseif not job then
    if where == 'list' then
      gone_listed[#gone_listed + 1] = id
    elseif where == 'wait' then
      gone_waiting[#gone_waiting + 1] = id
    elseif where then
      gone_held[#gone_held + 1] = id
    else
      gone[#gone + 1] = id
    end
    evicted = evicted + 1
  else
    local body = false
    if with_body then
      body = job.bd
      taken = taken + #body
    end
    rows[#rows + 1] = {id, to_seconds(score), job.al, job.ar, job.cs, to_seconds(job.ca), to_seconds(job.ua), job.cd, body,
      job.gr or false, job.ex or false, job.dk or false}
  end
end
emit_keyed_rows(out, rows, 11, 1, ids_key, 12)
zrem_all(set_key, gone)
if #gone_waiting > 0 then
  zrem_all(waiting_key, gone_waiting)
end
if #gone_held > 0 then
  drop_holds(held_key, expiry_key, holders_key, gone_held)
end
ready_bury(ready_key, records_key, gone_listed)
out[1] = evicted
out[2] = looked
if looked == #window and #window < count then
  out[3] = 1
end
if from_point then
  out[3] = (looked == #window and not more) and 1 or 0
  local seen = window[looked]
  out[#out + 1] = seen and to_seconds(seen[2]) or false
  out[#out + 1] = seen and seen[1] or false
end
return out
