-- ready: the ready lists of the compact layout (scripts that say `--@include ready` get this
-- file pasted in, after records).
--
-- Per priority, PENDING is split in two: the sorted set `plc:{S:Q}:p{p}:s0` (any run after), and
-- the ready list `plc:{S:Q}:p{p}:r`, for the common case of jobs enqueued with run after == the
-- enqueue's now: a list entry costs a few bytes where a sorted set member costs about a hundred.
-- A PENDING job is in exactly one of them. The list's entries, in (score, id) order:
--   a marker  '@<ms>' (ms an integer, maybe negative): the score (run after, ms) of the ids after
--             it, up to the next marker. Kept in the list so that every entry's score is known without its
--             record: an evicted job (record missing) still has its place, as in a sorted set;
--   an id     '<id>'  (a positive integer): a PENDING job, or the tombstone (record '') of a job
--             deleted in place (delete_jobs), until the list's head passes it.
-- Invariants: the head entry is a marker (or the list is absent); scores never go down along the
-- list (an enqueue whose now is before the list's last score puts its jobs in the sorted set);
-- the records hash field `t{p}` counts the entries that are not PENDING jobs (markers and
-- tombstones), so the list holds LLEN - t{p} PENDING jobs (evicted ones included, as ZCARD counts
-- a sorted set's evicted members). The field is the list key's priority: `...:p{p}:r` -> `t{p}`.

local READY_PAGE = 256  -- entries read per LRANGE

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

-- The list's last score (its newest jobs' run after), or nil if the list is empty. A live tail
-- record's ca is it (a job's score in the list is its ca); else the entries are read backwards to
-- the last marker.
local function last_score(ready_key, records_key)
  local tail = redis.call('LINDEX', ready_key, -1)
  if not tail then
    return nil
  end
  if is_marker(tail) then
    return marker_score(tail)
  end
  local jobs = read_records(records_key, {tail})
  if jobs[tail] then
    return jobs[tail].ca
  end
  local stop = -1
  while true do
    local page = redis.call('LRANGE', ready_key, stop - READY_PAGE + 1, stop)
    for i = #page, 1, -1 do
      if is_marker(page[i]) then
        return marker_score(page[i])
      end
    end
    stop = stop - READY_PAGE
  end
end

-- Append `ids` (ascending) scored `now` (ms). Returns false, appending nothing, if the list's last
-- score is after `now` (the caller puts them in the sorted set: always correct).
local function ready_push(ready_key, records_key, now, ids)
  if #ids == 0 then
    return true
  end
  local last = last_score(ready_key, records_key)
  if last and last > now then
    return false
  end
  local args, n = {}, 0
  if last ~= now then
    args[1], n = string.format('@%d', now), 1
    redis.call('HINCRBY', records_key, extra_field(ready_key), 1)
  end
  for _, id in ipairs(ids) do
    n = n + 1
    args[n] = id
  end
  for i = 1, n, RECORD_CHUNK do
    redis.call('RPUSH', ready_key, unpack(args, i, math.min(i + RECORD_CHUNK - 1, n)))
  end
  return true
end

-- A reader of the list from its head: peek() gives the next id entry as {id, score, job, state}
-- (state 'job' with its record, 'tombstone', or 'gone' for a missing record, with records read a
-- page at a time; without `with_records`, state and job are nil), or nil at the end; take()
-- moves past it. finish() trims what was taken off the list (keeping a marker at the head),
-- deletes the records of the tombstones taken and takes the markers and tombstones dropped off
-- `t{p}`. A reader that only reads never calls finish(). `page`: entries per LRANGE (default
-- READY_PAGE; a dequeue reads its limit and a marker at once).
local function ready_reader(ready_key, records_key, with_records, page)
  local reader = {}
  local page_size = math.max(1, math.min(page or READY_PAGE, RECORD_CHUNK))
  local buffer, at, read = {}, 1, 0  -- entries read, the next one not taken, list entries read
  local taken_extra = 0  -- markers and tombstones among the entries taken
  local buried = {}  -- the tombstones taken
  local score = nil  -- the score of the entries from `at` on
  local last_marker = nil  -- the last marker taken
  local ended = false

  local function fill()
    local page = redis.call('LRANGE', ready_key, read, read + page_size - 1)
    read = read + #page
    if #page < page_size then
      ended = true
    end
    local ids = {}
    for _, entry in ipairs(page) do
      if not is_marker(entry) then
        ids[#ids + 1] = entry
      end
    end
    local jobs, tombstones = {}, {}
    if with_records then
      jobs, tombstones = read_records(records_key, ids)
    end
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
        end
        buffer[#buffer + 1] = {id = entry, job = jobs[entry], state = state}
      end
    end
  end

  -- Move past markers to the next id entry (nil at the end).
  function reader.peek()
    while true do
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
    if e and e.state == 'tombstone' then
      taken_extra = taken_extra + 1
      buried[#buried + 1] = e.id
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
    local delta = -taken_extra
    -- the next entry is an id: keep the marker of its score in front of it
    local next_entry = buffer[at]
    local keeps_marker
    if next_entry then
      keeps_marker = not next_entry.marker
    else
      local entry = redis.call('LINDEX', ready_key, n)
      keeps_marker = entry and not is_marker(entry)
    end
    if keeps_marker and last_marker then
      redis.call('LSET', ready_key, n - 1, last_marker)
      redis.call('LTRIM', ready_key, n - 1, -1)
      delta = delta + 1
    else
      redis.call('LTRIM', ready_key, n, -1)
    end
    delete_records(records_key, buried)
    if delta ~= 0 then
      local field = extra_field(ready_key)
      if redis.call('HINCRBY', records_key, field, delta) == 0 then
        redis.call('HDEL', records_key, field)
      end
    end
  end

  return reader
end

-- Turn the list's jobs `ids` into tombstones (delete_jobs): counted in t{p} until the head passes.
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
  local after, stop = {}, -1
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
      else
        after[#after + 1] = entry
      end
    end
    if #page < READY_PAGE then
      done = true
    end
    stop = stop - READY_PAGE
  end
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

-- Which of `ids` the list holds (id -> true): one LPOS each, O(length of the list) in C; a Redis
-- before 6.0.6 has no LPOS, and gets one pass over the list instead.
local function ready_members(ready_key, ids)
  local members = {}
  if #ids == 0 then
    return members
  end
  local first = redis.pcall('LPOS', ready_key, ids[1])
  if type(first) ~= 'table' or not first.err then
    if first then
      members[ids[1]] = true
    end
    for i = 2, #ids do
      if redis.call('LPOS', ready_key, ids[i]) then
        members[ids[i]] = true
      end
    end
    return members
  end
  local wanted = {}
  for _, id in ipairs(ids) do
    wanted[id] = true
  end
  local from = 0
  while true do
    local page = redis.call('LRANGE', ready_key, from, from + READY_PAGE - 1)
    for _, entry in ipairs(page) do
      if wanted[entry] then
        members[entry] = true
      end
    end
    if #page < READY_PAGE then
      return members
    end
    from = from + READY_PAGE
  end
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

-- The first `limit` PENDING jobs of the list within the bounds, in order, as {id, score, job}
-- (job nil for an evicted one: its record is missing); tombstones are skipped.
local function ready_range(ready_key, records_key, low, high, limit)
  local out = {}
  local last = last_score(ready_key, records_key)
  if not last or ready_place(last, low, high) < 0 then
    return out  -- all below the range: not worth reading
  end
  local reader = ready_reader(ready_key, records_key, true)
  while #out < limit do
    local e = reader.take()
    if not e then
      break
    end
    local place = ready_place(e.score, low, high)
    if place > 0 then
      break
    end
    if place == 0 and e.state ~= 'tombstone' then
      out[#out + 1] = {e.id, e.score, e.job}
    end
  end
  return out
end

-- The first `n` entries of the list within the bounds in scan order (oldest first, or newest
-- first), as {id, score} pairs, tombstones included (they keep their places, as a scan's
-- `looked` counts them); records are not read.
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
    local reader = ready_reader(ready_key, records_key, false)
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
        out[#out + 1] = {e.id, e.score}
      end
    end
    return out
  end
  -- Backwards: an id's score is its marker's, further back, so ids wait for their marker.
  local waiting = {}  -- ids after the marker not met yet, tail first
  local stop = -1
  while true do
    local page = redis.call('LRANGE', ready_key, stop - READY_PAGE + 1, stop)
    for i = #page, 1, -1 do
      local entry = page[i]
      if is_marker(entry) then
        local score = marker_score(entry)
        local place = ready_place(score, low, high)
        if place < 0 then
          return out
        end
        if place == 0 then
          for _, id in ipairs(waiting) do
            out[#out + 1] = {id, score}
            if #out >= n then
              return out
            end
          end
        end
        waiting = {}
      else
        waiting[#waiting + 1] = entry
      end
    end
    if #page < READY_PAGE then
      return out
    end
    stop = stop - READY_PAGE
  end
end
