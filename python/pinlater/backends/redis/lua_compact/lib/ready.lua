-- ready: the ready lists of the compact layout (scripts that say `--@include ready` get this
-- file pasted in, after records).
--
-- Per priority, PENDING is split in two: the sorted set `plc:{S:Q}:p{p}:s0` (any run after), and
-- the ready list `plc:{S:Q}:p{p}:r`, for the common case of jobs enqueued with run after == the
-- enqueue's now: a list entry costs a few bytes where a sorted set member costs about a hundred.
-- A PENDING job is in exactly one of them. The list's entries, in (score, id) order:
--   a marker  '@<ms>' (ms an integer, maybe negative): the score (run after, ms) of the ids after
--             it, up to the next marker. Kept in the list so that every entry's score is known
--             without its record: an evicted job (record missing) still has its place, as in a
--             sorted set;
--   an id     '<id>'  (a positive integer): a PENDING job; or, while its record is the tombstone
--             '' (records.lua), the place of a job deleted in place, until the list's head
--             passes it;
--   '-<id>'   the place of a job cancelled in place (cancel_jobs.lua: its record, FAILED now,
--             stays under its id): the entry was renamed, and the field '-<id>' of the records
--             hash holds a tombstone, so that every reader, of any build, passes it as one (and
--             a build that compares a list's ids as numbers reads a number).
-- Invariants: the head entry is a marker (or the list is absent); every append starts with one,
-- and puts one before every READY_RUN ids (markers of one score may follow each other's runs);
-- scores never go down along the
-- list (an enqueue whose now is before the list's last score puts its jobs in the sorted set);
-- ids go up as numbers along the list (an enqueue appends ids above every id before it), and
-- among the ids of one score as text too (an enqueue whose id would gain a digit among them puts
-- it in the sorted set instead: ready_room), so the list is in the order a sorted set keeps,
-- (score, id as text); the records hash field `t{p}` counts the entries that are not PENDING jobs
-- (markers and tombstones), so the list holds LLEN - t{p} PENDING jobs (evicted ones included, as
-- ZCARD counts a sorted set's evicted members). The field is the list key's priority:
-- `...:p{p}:r` -> `t{p}`.
-- What that order buys: an id is found by halving (ready_find, about log2(length) LINDEX
-- probes), and so is a point of a scan (ready_index), so no call searches the list end to end.
-- Readers of the head (dequeue, reserve, a range delete, the move to the original layout) pass
-- at most READY_SKIP_BUDGET entries that are no jobs per call, and trim what they passed.
-- Earlier builds wrote the same entries (but no '-' ones) and read these: a '-' entry is a
-- tombstone to them too. Their runs may break the text order where an id gained a digit; only
-- the order of a scan's equal scores there suffers.

local READY_PAGE = 256  -- entries read per LRANGE
local READY_SKIP_BUDGET = 4096  -- entries that are no jobs a reader of the head passes per call
local READY_RUN = 256  -- ids between two markers at most (each append starts with a marker)
local CANCELLED_PLACE = '-'  -- the prefix of the entry of a job cancelled in place

-- The records hash field counting the list's markers and tombstones.
local function extra_field(ready_key)
  return 't' .. string.match(ready_key, ':p(%d+):r$')
end

local function is_marker(entry)
  return string.byte(entry, 1) == 64  -- '@'
end

local function marker_score(entry)
  return tonumber(string.sub(entry, 2))
end

-- The entries of a page of the list that are not markers.
local function page_ids(page)
  local ids = {}
  for _, entry in ipairs(page) do
    if not is_marker(entry) then
      ids[#ids + 1] = entry
    end
  end
  return ids
end

-- The id an entry names ('-<id>' names <id>) and whether it is a cancelled job's place.
local function entry_id(entry)
  if string.byte(entry, 1) == 45 then  -- '-'
    return string.sub(entry, 2), true
  end
  return entry, false
end

-- The score of the id entry `entry` at index i (nil: the tail): its record's ca (a job's score
-- in the list is its ca), or for a tombstone or an evicted job its marker's, read backwards.
local function id_score(ready_key, records_key, entry, i)
  local packed = redis.call('HGET', records_key, entry)
  if packed and packed ~= TOMBSTONE then
    local _, _, _, ca = record_items(packed)
    return ca
  end
  local stop = (i or redis.call('LLEN', ready_key) - 1) - 1
  while true do  -- the head is a marker
    local page = redis.call('LRANGE', ready_key, math.max(0, stop - READY_PAGE + 1), stop)
    for j = #page, 1, -1 do
      if is_marker(page[j]) then
        return marker_score(page[j])
      end
    end
    stop = stop - READY_PAGE
  end
end

-- The list's entry at index i as its place in the list's order: (score, id). A marker's is the
-- id after it (markers are never last): markers of one score may follow each other's runs, so
-- '' would go back.
local function ready_key_at(ready_key, records_key, i)
  local entry = redis.call('LINDEX', ready_key, i)
  if is_marker(entry) then
    local after = redis.call('LINDEX', ready_key, i + 1)
    return marker_score(entry), after and not is_marker(after) and (entry_id(after)) or ''
  end
  return id_score(ready_key, records_key, entry, i), (entry_id(entry))
end

-- The index of the list's first entry at or after (score, id) (id '' for the start of the run
-- of that score), of its `length` entries: found by halving, as the list is in (score, id as
-- text) order, so about log2(length) LINDEX probes (and a record read each).
local function ready_index(ready_key, records_key, length, score, id)
  local lo, hi = 0, length
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local s, e = ready_key_at(ready_key, records_key, mid)
    if s < score or (s == score and e < id) then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

-- The list's tail: its last score (its newest jobs' run after) and its last entry; nil if the
-- list is empty.
local function ready_tail(ready_key, records_key)
  local tail = redis.call('LINDEX', ready_key, -1)
  if not tail then
    return nil
  elseif is_marker(tail) then
    return marker_score(tail), tail
  end
  return id_score(ready_key, records_key, tail), tail
end

local function last_score(ready_key, records_key)
  return (ready_tail(ready_key, records_key))
end

-- How many of `ids` (ascending as numbers, to be scored `now`) may go to the list, a prefix:
-- none if the list's last score is after `now`; else up to the first id that would break the
-- text order of the list's run of `now` (an id with a digit more than the one before it). The
-- others go to the sorted set (always correct); the caller then calls ready_append.
local function ready_room(ready_key, records_key, now, ids)
  if #ids == 0 then
    return 0
  end
  local last, tail = ready_tail(ready_key, records_key)
  if last and last > now then
    return 0
  end
  local before = nil
  if last == now and not is_marker(tail) then
    before = entry_id(tail)
  end
  local n = 0
  for _, id in ipairs(ids) do
    if before and not (id > before) then
      break
    end
    before = id
    n = n + 1
  end
  return n
end

-- Append the first `count` of `ids` (as ready_room allowed; all of them without a count) scored
-- `now`, a marker before each READY_RUN of them: a run between two markers stays short even
-- where one millisecond brings many jobs, so that a tombstone's score is found within a page
-- (ready_key_at, ready_tail) and a reader backwards holds at most a run of ids waiting for it.
local function ready_append(ready_key, records_key, now, ids, count)
  count = count or #ids
  if count == 0 then
    return
  end
  local marker = string.format('@%d', now)
  local args, n, markers = {}, 0, 0
  for i = 1, count do
    if (i - 1) % READY_RUN == 0 then
      n, markers = n + 1, markers + 1
      args[n] = marker
    end
    n = n + 1
    args[n] = ids[i]
  end
  redis.call('HINCRBY', records_key, extra_field(ready_key), markers)
  for i = 1, n, RECORD_CHUNK do
    redis.call('RPUSH', ready_key, unpack(args, i, math.min(i + RECORD_CHUNK - 1, n)))
  end
end

-- Trim the first n entries off the list, entries taken from its head; `keep`: the last marker
-- among them, to stay in front of the next entry (an id), or false; `delta`: what t{p} loses or
-- gains for the markers and tombstones taken (as a negative number), the kept marker added back.
local function ready_trim(ready_key, records_key, n, keep, delta)
  if keep then
    redis.call('LSET', ready_key, n - 1, keep)
    redis.call('LTRIM', ready_key, n - 1, -1)
    delta = delta + 1
  else
    redis.call('LTRIM', ready_key, n, -1)
  end
  if delta ~= 0 then
    local field = extra_field(ready_key)
    if redis.call('HINCRBY', records_key, field, delta) == 0 then
      redis.call('HDEL', records_key, field)
    end
  end
end

-- A reader of the list from its head: peek() gives the next id entry as {id, score, job, state}
-- (state 'job' with its record, 'tombstone' (a cancelled job's '-' entry is one), or 'gone' for
-- a missing record, with records read a page at a time; without `with_records`, state and job
-- are nil), or nil at the end; take() moves past it. With records, the reader ends (peek()
-- gives nil, `reader.cut` true) once it has taken READY_SKIP_BUDGET entries that are no jobs;
-- the next call goes on from there. finish() trims what was taken off the list (keeping a
-- marker at the head), deletes the records of the tombstones taken and takes the markers and
-- tombstones dropped off `t{p}`. A reader that only reads never calls finish(). `page`: entries
-- per LRANGE to start with (default READY_PAGE; a dequeue reads its limit and a marker at once),
-- doubled up to READY_PAGE while entries that are no jobs turn up. `from` (default 0): the index
-- to read from, for a reader that only reads (finish() trims from the head). `sizer` (optional):
-- a function giving the entries each LRANGE reads instead (at most RECORD_CHUNK), for a reader
-- whose records must stay within a byte budget.
local function ready_reader(ready_key, records_key, with_records, page, from, sizer)
  local reader = {cut = false}
  local page_size = math.max(1, math.min(page or READY_PAGE, RECORD_CHUNK))
  local buffer, at, read = {}, 1, from or 0  -- entries read, the next one not taken, list entries read
  local taken_extra = 0  -- markers and tombstones among the entries taken
  local skipped = 0  -- entries taken that are no jobs
  local buried = {}  -- the tombstones taken
  local score = nil  -- the score of the entries from `at` on
  local last_marker = nil  -- the last marker taken
  local ended = false
  if read > 0 then  -- past the head's marker: the score of the first entry
    score = ready_key_at(ready_key, records_key, read)
  end

  local function fill()
    if sizer then
      page_size = math.max(1, math.min(sizer(), RECORD_CHUNK))
    end
    local page = redis.call('LRANGE', ready_key, read, read + page_size - 1)
    read = read + #page
    if #page < page_size then
      ended = true
    end
    local jobs, tombstones = {}, {}
    if with_records then
      jobs, tombstones = read_records(records_key, page_ids(page))
    end
    local others = false
    for _, entry in ipairs(page) do
      if is_marker(entry) then
        buffer[#buffer + 1] = {marker = marker_score(entry), entry = entry}
      else
        local state = nil
        if with_records then
          if jobs[entry] then
            state = 'job'
          elseif tombstones[entry] then
            state = 'tombstone'
          else
            state = 'gone'
          end
          others = others or state ~= 'job'
        end
        buffer[#buffer + 1] = {id = entry, job = jobs[entry], state = state}
      end
    end
    if others then
      page_size = math.min(2 * page_size, READY_PAGE, RECORD_CHUNK)
    end
  end

  -- Move past markers to the next id entry (nil at the end, or once the budget is spent).
  function reader.peek()
    while true do
      if skipped >= READY_SKIP_BUDGET then
        reader.cut = true
        return nil
      end
      if at > #buffer then
        if ended then
          return nil
        end
        fill()
        if at > #buffer then
          return nil
        end
      end
      local e = buffer[at]
      if e.marker then
        score, last_marker = e.marker, e.entry
        taken_extra = taken_extra + 1
        at = at + 1
      else
        e.score = score
        return e
      end
    end
  end

  function reader.take()
    local e = reader.peek()
    if not e then
      return nil
    end
    if e.state == 'tombstone' then
      taken_extra = taken_extra + 1
      buried[#buried + 1] = e.id
    end
    if e.state and e.state ~= 'job' then
      skipped = skipped + 1
    end
    at = at + 1
    return e
  end

  -- Drop the entries taken from the list; the tombstones taken lose their records.
  function reader.finish()
    local n = at - 1
    if n == 0 then
      return
    end
    -- the next entry is an id: keep the marker of its score in front of it
    local next_entry = buffer[at]
    local keeps_marker
    if next_entry then
      keeps_marker = not next_entry.marker
    else
      local entry = redis.call('LINDEX', ready_key, n)
      keeps_marker = entry and not is_marker(entry)
    end
    ready_trim(ready_key, records_key, n, keeps_marker and last_marker, -taken_extra)
    delete_records(records_key, buried)
  end

  return reader
end

-- Drop from the list's head the jobs `ids` (being deleted: their records are the caller's to
-- delete), with the tombstones among and before them, as far as they run
-- unbroken from the head: a delete of the oldest jobs leaves no tombstones for the readers after
-- it to pass. Returns the ids not dropped (the caller buries them in place: ready_bury), then
-- those dropped.
local function ready_drop_head(ready_key, records_key, ids)
  local chosen = {}
  for _, id in ipairs(ids) do
    chosen[id] = true
  end
  local reader = ready_reader(ready_key, records_key, true, #ids + 1)
  local dropped = {}
  while #dropped < #ids do
    local e = reader.peek()
    if not e then
      break
    end
    if e.state == 'job' and chosen[e.id] then
      chosen[e.id] = nil
      dropped[#dropped + 1] = e.id
    elseif e.state ~= 'tombstone' then
      break  -- a job not deleted, or an evicted one (left for a dequeue to count)
    end
    reader.take()
  end
  reader.finish()
  local rest = {}
  for _, id in ipairs(ids) do
    if chosen[id] then
      rest[#rest + 1] = id
    end
  end
  return rest, dropped
end

-- Turn the list's entries `ids` into tombstones, counted in t{p} until the head passes them: jobs
-- deleted in place (delete_jobs), or entries whose records a lookup or a scan found missing
-- (evicted: counted there, once, as a set's evicted member is removed).
local function ready_bury(ready_key, records_key, ids)
  if #ids > 0 then
    write_tombstones(records_key, ids)
    redis.call('HINCRBY', records_key, extra_field(ready_key), #ids)
  end
end

-- How many of the list's PENDING jobs (evicted ones included) have a score at most `high` (ms),
-- or below it if `exclusive`: all of them, less the suffix of ids scored after. The common case
-- (the last score is within) costs an LINDEX and a record read; else the suffix is read
-- backwards to a marker within, with its records (tombstones are not jobs).
local function ready_count_to(ready_key, records_key, high, exclusive)
  local total = redis.call('LLEN', ready_key)
  if total == 0 then
    return 0
  end
  total = total - tonumber(redis.call('HGET', records_key, extra_field(ready_key)) or 0)
  local function within(score)
    if exclusive then
      return score < high
    end
    return score <= high
  end
  local last = last_score(ready_key, records_key)
  if within(last) then
    return total
  end
  -- the ids after the last marker within (an id's run is known at its marker, further back)
  local after, run, stop = {}, {}, -1
  local done = false
  while not done do
    local page = redis.call('LRANGE', ready_key, stop - READY_PAGE + 1, stop)
    for i = #page, 1, -1 do
      local entry = page[i]
      if is_marker(entry) then
        if within(marker_score(entry)) then
          done = true
          break
        end
        for _, id in ipairs(run) do
          after[#after + 1] = id
        end
        run = {}
      else
        run[#run + 1] = entry
      end
    end
    if #page < READY_PAGE then
      done = true
    end
    stop = stop - READY_PAGE
  end
  -- tombstones are no jobs; evicted ones (no record) count, as in ZCARD
  local _, tombstones = read_records(records_key, after)
  local n = #after
  for _ in pairs(tombstones) do
    n = n - 1
  end
  return total - n
end

-- How many of the list's PENDING jobs have a score within ZRANGEBYSCORE bounds in ms ('-inf',
-- '+inf', '(x' or 'x', as bound_ms gives them).
local function ready_count(ready_key, records_key, low, high)
  local function upto(bound, below)
    if bound == '-inf' then
      return 0
    end
    if bound == '+inf' or bound == 'inf' then
      return ready_count_to(ready_key, records_key, math.huge, false)
    end
    local exclusive = string.sub(bound, 1, 1) == '('
    if exclusive then
      bound = string.sub(bound, 2)
    end
    -- jobs <= high (or < high); for the low bound, jobs < low (or <= low when exclusive)
    if below then
      exclusive = not exclusive
    end
    return ready_count_to(ready_key, records_key, tonumber(bound), exclusive)
  end
  local n = upto(high, false) - upto(low, true)
  if n < 0 then
    return 0
  end
  return n
end

-- The index of the entry of `id` in the list and the entry (the id, or '-<id>' for a job
-- cancelled in place), or nil: found by halving, as the list's ids go up as numbers; a probe
-- that meets a marker reads the entry after it. About log2(length) LINDEX probes.
local function ready_find(ready_key, id)
  local want = tonumber(id)
  local lo, hi = 0, redis.call('LLEN', ready_key) - 1
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local at, entry = mid, redis.call('LINDEX', ready_key, mid)
    while entry and is_marker(entry) and at < hi do
      at = at + 1
      entry = redis.call('LINDEX', ready_key, at)
    end
    if not entry or is_marker(entry) then
      hi = mid - 1  -- only markers from mid to hi
    else
      local got = tonumber((entry_id(entry)))
      if got == want then
        return at, entry
      elseif got < want then
        lo = at + 1
      else
        hi = mid - 1
      end
    end
  end
  return nil
end

-- Which of `ids` the list holds as PENDING jobs or tombstones (id -> true; not the cancelled
-- jobs' places): ready_find for each.
local function ready_members(ready_key, ids)
  local members = {}
  for _, id in ipairs(ids) do
    local _, entry = ready_find(ready_key, id)
    if entry == id then
      members[id] = true
    end
  end
  return members
end

-- Cancel in place the list's job `id` (its record is the caller's to rewrite): its entry becomes
-- '-<id>', a tombstone (the field '-<id>' of the records hash holds one), counted in t{p}.
-- Returns whether the list holds it.
local function ready_cancel(ready_key, records_key, id)
  local at, entry = ready_find(ready_key, id)
  if entry ~= id then
    return false
  end
  local place = CANCELLED_PLACE .. id
  redis.call('LSET', ready_key, at, place)
  redis.call('HSET', records_key, place, TOMBSTONE)
  redis.call('HINCRBY', records_key, extra_field(ready_key), 1)
  return true
end

-- The index of the list's first entry within a ZRANGEBYSCORE low bound in ms (as bound_ms gives
-- it), of its `length` entries.
local function ready_low_index(ready_key, records_key, length, low)
  if low == '-inf' then
    return 0
  end
  local exclusive = string.sub(low, 1, 1) == '('
  local bound = tonumber(exclusive and string.sub(low, 2) or low)
  return ready_index(ready_key, records_key, length, exclusive and bound + 1 or bound, '')
end

-- Where `score` (ms) lies against ZRANGEBYSCORE bounds in ms (as bound_ms gives them): -1 below
-- `low`, 0 within, 1 above `high`.
local function ready_place(score, low, high)
  local function cmp(bound)
    if bound == '-inf' then
      return 1
    elseif bound == '+inf' or bound == 'inf' then
      return -1
    end
    local exclusive = string.sub(bound, 1, 1) == '('
    local value = tonumber(exclusive and string.sub(bound, 2) or bound)
    if score < value then
      return -1
    elseif score > value then
      return 1
    end
    return exclusive and 2 or 0  -- 2: equal to an excluded bound
  end
  local c = cmp(low)
  if c == -1 or c == 2 then
    return -1
  end
  c = cmp(high)
  if c == 1 or c == 2 then
    return 1
  end
  return 0
end

-- The list's entries within the bounds (ms, as bound_ms gives them) newest first, after the
-- point (point_ms, point_id) if given, as {id, score (text)} (as ready_scan gives them). The
-- list is in (score, id as text) order, so the first entry past `high` or at the point is found
-- by halving (ready_index), and the `n` before it are read backwards, each run's score from the
-- first of its jobs met (its record's ca) or else its marker: about n entries and log2(length)
-- probes, however deep the point.
local function ready_back(ready_key, records_key, low, high, n, point_ms, point_id)
  local out = {}
  local length = redis.call('LLEN', ready_key)
  if length == 0 or n <= 0 then
    return out
  end
  local stop = length
  if high ~= '+inf' and high ~= 'inf' then
    local exclusive = string.sub(high, 1, 1) == '('
    local bound = tonumber(exclusive and string.sub(high, 2) or high)
    stop = ready_index(ready_key, records_key, length, exclusive and bound or bound + 1, '')
  end
  if point_ms then
    stop = math.min(stop, ready_index(ready_key, records_key, length, point_ms, point_id))
  end
  local unplaced = {}  -- entries read whose score is not known yet (their marker is further back)
  local function place(score)
    if ready_place(score, low, high) < 0 then
      return false
    end
    local text = string.format('%d', score)
    for _, entry in ipairs(unplaced) do
      local id, cancelled = entry_id(entry)
      if not cancelled then
        out[#out + 1] = {id, text}
        if #out >= n then
          return false
        end
      end
    end
    unplaced = {}
    return true
  end
  stop = stop - 1
  local size = math.min(n + 1, READY_PAGE)  -- entries per LRANGE: the n and a marker, then more
  while stop >= 0 do
    local page = redis.call('LRANGE', ready_key, math.max(0, stop - size + 1), stop)
    local jobs = read_records(records_key, page_ids(page))
    for j = #page, 1, -1 do
      local entry = page[j]
      if is_marker(entry) then
        if not place(marker_score(entry)) then
          return out
        end
      else
        unplaced[#unplaced + 1] = entry
        local job = jobs[entry]
        if job and not place(job.ca) then
          return out
        end
      end
    end
    stop = stop - size
    size = math.min(2 * size, READY_PAGE)
  end
  return out
end

-- The first `limit` PENDING jobs of the list within the bounds, in order, as {id, score, job}
-- (job nil for an evicted one: its record is missing); tombstones are skipped.
local function ready_range(ready_key, records_key, low, high, limit)
  local out = {}
  local last = last_score(ready_key, records_key)
  if not last or ready_place(last, low, high) < 0 then
    return out  -- all below the range: not worth reading
  end
  local from = ready_low_index(ready_key, records_key, redis.call('LLEN', ready_key), low)
  local reader = ready_reader(ready_key, records_key, true, math.min(limit + 1, READY_PAGE), from)
  while #out < limit do
    local e = reader.take()
    if not e then
      break
    end
    local place = ready_place(e.score, low, high)
    if place > 0 then
      break
    end
    if place == 0 and (e.state == 'job' or e.state == 'gone') then
      out[#out + 1] = {e.id, e.score, e.job}
    end
  end
  return out
end

-- The first `n` entries of the list within the bounds in scan order (oldest first, or newest
-- first), as {id, score} pairs, tombstones of deleted jobs included (they keep their places, as a
-- scan's `looked` counts them) but not the places of jobs cancelled in place (`-<id>`): such a job
-- may be PENDING again in the sorted set with the same score and id, and one place is all a
-- point may name; records are not read.
local function ready_scan(ready_key, records_key, low, high, n, newest_first)
  local out = {}
  if n <= 0 then
    return out
  end
  local head = redis.call('LINDEX', ready_key, 0)
  if not head then
    return out
  end
  local last = last_score(ready_key, records_key)
  if ready_place(last, low, high) < 0 or ready_place(marker_score(head), low, high) > 0 then
    return out  -- the whole list is outside the range
  end
  if not newest_first then
    local from = ready_low_index(ready_key, records_key, redis.call('LLEN', ready_key), low)
    local reader = ready_reader(ready_key, records_key, false, READY_PAGE, from)
    while #out < n do
      local e = reader.take()
      if not e then
        break
      end
      local place = ready_place(e.score, low, high)
      if place > 0 then
        break
      end
      if place == 0 then
        local _, cancelled = entry_id(e.id)
        if not cancelled then
          out[#out + 1] = {e.id, e.score}
        end
      end
    end
    return out
  end
  return ready_back(ready_key, records_key, low, high, n)
end
