-- records: the jobs of a compact queue, one packed record per job (scripts that say
-- `--@include records` get this file pasted in; see keys_compact.py for the layout).
--
-- The records hash (`plc:{S:Q}:j`, passed where the original passes its job hash key prefix)
-- maps a local id (decimal) to cmsgpack.pack({bd, al, ar, ca, ua, cs, cd[, gr, gq[, ex]]}):
--   bd  body                        al  attempts allowed      ar  attempts remaining
--   ca  created at, integer ms      ua  updated at, stored as ms after ca (ua - ca)
--   cs  custom status ('' if none)  cd  claim descriptor, or false if the job has no claim
--   gr  the job's ordered group (groupKey), only for a job of a group (lib/groups.lua), and
--   gq  its place in the group's FIFO (its id, or a later number once retried)
--   ex  the job's expiry (expireAtTimestampMillis), integer ms, only for a job that has one
--       (then gr and gq are false for a job of no group)
-- A job without a group has seven items, as before groups, so its record costs nothing more.
-- ua is kept as a delta so that a job never touched since its enqueue stores 0 (one byte of
-- msgpack, not nine): a record of a 100-byte body is then 124 bytes, which jemalloc keeps in its
-- 128-byte class instead of the 160 one. Readers get ua in ms since the epoch, as the other times.
-- The value '' is a tombstone (ready.lua): a job deleted while in a ready list.
-- Only this file packs and unpacks records. Reads and writes go a batch at a time (one HMGET,
-- one HSET, HDEL in chunks), so a script makes a constant number of calls per batch, not per job.

local RECORD_CHUNK = 1000  -- members per variadic command, far below Lua's unpack limit (8000)

-- The times of a batch are mostly a few values (one now, a run after shared by a batch), and
-- converting one costs more than a table lookup: both conversions keep what they made, for this
-- script call (a script's locals start afresh with each call).
local ms_of_seconds, seconds_of_ms = {}, {}

-- Seconds as float text (an ARGV time, a score or an ca/ua of the original layout) to integer ms.
local function to_ms(seconds)
  local ms = ms_of_seconds[seconds]
  if not ms then
    ms = math.floor(tonumber(seconds) * 1000 + 0.5)
    ms_of_seconds[seconds] = ms
  end
  return ms
end

-- Integer ms (a number, or a score as Redis returns it) to seconds as text that a float parser
-- reads back as ms / 1000 exactly. The sign goes in front: '%d.%03d' of floor(ms / 1000) would
-- read -1500 as -2.500.
local function to_seconds(ms)
  local text = seconds_of_ms[ms]
  if text then
    return text
  end
  local value, sign = tonumber(ms), ''
  if value < 0 then
    sign, value = '-', -value
  end
  local whole = math.floor(value / 1000)
  text = string.format('%s%d.%03d', sign, whole, value - whole * 1000)
  seconds_of_ms[ms] = text
  return text
end

-- A ZRANGEBYSCORE bound in seconds ('-inf', '+inf', '(x' or 'x') as the same bound in ms.
-- Formatted with all 17 digits: Lua's tostring keeps 14, which would move a bound past 1e14 ms.
local function bound_ms(bound)
  if bound == '-inf' or bound == '+inf' or bound == 'inf' then
    return bound
  end
  if string.sub(bound, 1, 1) == '(' then
    return string.format('(%.17g', to_ms(string.sub(bound, 2)))
  end
  return string.format('%.17g', to_ms(bound))
end

-- The items read straight after the array's one-byte header (0x97, 0x99 with a group, 0x9a with an expiry),
-- without the table cmsgpack.unpack would build for the array (a quarter of the time).
local function unpack_record(packed)
  local _, bd, al, ar, ca, ua, cs, cd, gr, gq, ex = cmsgpack.unpack_limit(packed, 10, 1)
  return {bd = bd, al = al, ar = ar, ca = ca, ua = ca + ua, cs = cs, cd = cd, gr = gr or nil, gq = gq or nil, ex = ex}
end

local function pack_record(job)
  if job.ex then
    return cmsgpack.pack({job.bd, job.al, job.ar, job.ca, job.ua - job.ca, job.cs or '', job.cd or false,
      job.gr or false, job.gq or false, job.ex})
  end
  if job.gr then
    return cmsgpack.pack({job.bd, job.al, job.ar, job.ca, job.ua - job.ca, job.cs or '', job.cd or false, job.gr,
      job.gq})
  end
  return cmsgpack.pack({job.bd, job.al, job.ar, job.ca, job.ua - job.ca, job.cs or '', job.cd or false})
end

-- A deleted job of a ready list, until the list's head passes it (ready.lua).
local TOMBSTONE = ''

-- The records of `ids`, as a table id -> job ({bd, al, ar, ca, ua, cs, cd}; cd false if none),
-- with no entry for an id whose record is missing (evicted or deleted) or a tombstone; the
-- second table returned names the tombstones (id -> true).
local function read_records(records_key, ids)
  local jobs, tombstones = {}, {}
  for i = 1, #ids, RECORD_CHUNK do
    local last = math.min(i + RECORD_CHUNK - 1, #ids)
    local packed = redis.call('HMGET', records_key, unpack(ids, i, last))
    for j = i, last do
      local value = packed[j - i + 1]
      if value == TOMBSTONE then
        tombstones[ids[j]] = true
      elseif value then
        jobs[ids[j]] = unpack_record(value)
      end
    end
  end
  return jobs, tombstones
end

-- Replace the records of `ids` by tombstones.
local function write_tombstones(records_key, ids)
  local args, n = {}, 0
  for _, id in ipairs(ids) do
    args[n + 1], args[n + 2] = id, TOMBSTONE
    n = n + 2
  end
  for i = 1, #args, 2 * RECORD_CHUNK do
    redis.call('HSET', records_key, unpack(args, i, math.min(i + 2 * RECORD_CHUNK - 1, #args)))
  end
end

-- Write back the jobs of `ids` (each a table as read_records gives) found in `jobs`.
local function write_records(records_key, ids, jobs)
  local args, n = {}, 0
  for _, id in ipairs(ids) do
    local job = jobs[id]
    if job then
      args[n + 1], args[n + 2] = id, pack_record(job)
      n = n + 2
    end
  end
  for i = 1, #args, 2 * RECORD_CHUNK do
    redis.call('HSET', records_key, unpack(args, i, math.min(i + 2 * RECORD_CHUNK - 1, #args)))
  end
end

local function delete_records(records_key, ids)
  for i = 1, #ids, RECORD_CHUNK do
    redis.call('HDEL', records_key, unpack(ids, i, math.min(i + RECORD_CHUNK - 1, #ids)))
  end
end
