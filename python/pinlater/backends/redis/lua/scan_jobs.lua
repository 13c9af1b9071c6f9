--[[ scan_jobs: read up to ARGV[6] jobs of one set within a score range, from an offset; for
PENDING, merged with the jobs the dequeue broker holds (lib/holds.lua), which are PENDING too.
With bodies and a byte budget (ARGV[9]), the page stops early once the bodies taken reach it, so
it holds at most the budget plus one body, and always at least one member.

Also the candidate reader for body-regex filters, which cannot run in Lua (it has no regular
expressions): the store pages through with bodies and matches in Python. A member whose hash is
gone (evicted) is removed from its set, counted, and skipped; `looked` (members of the window
read, evicted ones included) tells the caller how far the offset moved, and `last` whether the
range ends within them. Order: by score, equal scores by id as text (Redis' order), reversed when
newest first; the held set's members take their places in that order.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  the queue's dedup ids hash (pld_{shard}_{queue}.i: id -> dedup key, keys.py)
KEYS[3]  the sorted set to read (plq_{shard}_{queue}.p{p}_s{s})
KEYS[4]  optional, with KEYS[5] and KEYS[6]: the held set, hold expiry set and holders hash to
         merge (plq_{shard}_{queue}.p{p}_h, _x, _o)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  lowest score (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  offset (in members of the range, after earlier evictions were removed)
ARGV[6]  count
ARGV[7]  '1' to include bodies, else '0'
ARGV[8]  '1' for highest score first, else '0'
ARGV[9]  optional: with bodies, stop once the bodies taken reach this many bytes ('0' or none:
         no bound)
ARGV[10] optional, newest first only: a point (score) to page from instead of the offset (which
         is then 0): the window is the `count` members that come after (ARGV[10], ARGV[11]) in
         scan order (lib/after.lua), whether or not that member is still there; '' or none: an
         offset read
ARGV[11] with ARGV[10]: the point's id

Hash fields: bd al ar cs ca ua cd (keys.JobField).
Returns {evicted, looked, last (1 if no member of the range follows the ones looked at, else 0),
then 10 values per job: id, score, al, ar, cs, ca, ua, cd (nil if none),
bd (nil unless asked), its dedup key (nil if none)}, or -1 if the queue does not exist. From a
point (ARGV[10]), two values follow the rows: the score and id of the last member looked at (the
next page's point; nil when none was), and `last` says whether members of the range may follow
it.
]]
--@include keyed_rows
--@include holds
--@include after
local names_key, ids_key, set_key = KEYS[1], KEYS[2], KEYS[3]
local held_key, expiry_key, holders_key = KEYS[4], KEYS[5], KEYS[6]
local queue, hash_prefix, low, high = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local offset, count = tonumber(ARGV[5]), tonumber(ARGV[6])
local with_body, newest_first = ARGV[7] == '1', ARGV[8] == '1'
local point_score, point_id = ARGV[10], ARGV[11]
local from_point = point_score ~= nil
if point_score == '' then
  point_score = nil
end
if not redis.call('ZSCORE', names_key, queue) then
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

-- The window [offset, offset + count) of the range: {id, score, held?} triples, in order.
local window = {}
local more = false  -- from a point: whether a set may hold members past the window
if from_point then
  -- The `count` newest after the point of each set, merged: the window's members are among them.
  local merged = {}
  local sources = {{set_key, false}}
  if held_key then
    sources[2] = {held_key, true}
  end
  for _, source in ipairs(sources) do
    local got = newest_after(source[1], low, high, point_score, point_id, count)
    more = more or #got >= count
    for _, m in ipairs(got) do
      merged[#merged + 1] = {m[1], m[2], source[2]}
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
  -- Held members in the window are among its first offset + count; set members among those
  -- from offset - #held. One set member more is read (at `base`) to place held members before it.
  local held = range(held_key, 0, offset + count)
  local base = math.max(0, offset - #held - 1)
  local main = range(set_key, base, offset + count - base)
  local placed = {}
  local p = 1
  for i, m in ipairs(main) do
    while p <= #held and before(held[p], m) do
      p = p + 1
    end
    placed[#placed + 1] = {base + (i - 1) + (p - 1), m[1], m[2], false}
  end
  p = 1
  for j, h in ipairs(held) do
    while p <= #main and before(main[p], h) do
      p = p + 1
    end
    -- before the first set member read, past `base`: the window starts later
    if base == 0 or p > 1 then
      placed[#placed + 1] = {(j - 1) + base + (p - 1), h[1], h[2], true}
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
local out = {0, 0, 0}
local rows = {}
local evicted, looked, taken = 0, 0, 0
for _, m in ipairs(window) do
  if with_body and budget > 0 and taken >= budget then
    break
  end
  looked = looked + 1
  local id, score, is_held = m[1], m[2], m[3]
  local hash_key = hash_prefix .. id
  local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'cs', 'ca', 'ua', 'cd')
  if not job[1] or not job[2] then
    if is_held then
      drop_holds(held_key, expiry_key, holders_key, {id})
    else
      redis.call('ZREM', set_key, id)
    end
    redis.call('DEL', hash_key)
    evicted = evicted + 1
  else
    local body = false
    if with_body then
      body = job[1]
      taken = taken + #body
    end
    rows[#rows + 1] = {id, score, job[2], job[3], job[4], job[5], job[6], job[7], body}
  end
end
emit_keyed_rows(out, rows, 9, 1, ids_key)
out[1] = evicted
out[2] = looked
if looked == #window and #window < count then
  out[3] = 1
end
if from_point then
  out[3] = (looked == #window and not more) and 1 or 0
  local seen = window[looked]
  out[#out + 1] = seen and seen[2] or false
  out[#out + 1] = seen and seen[1] or false
end
return out
