-- records: the jobs of a compact queue, one packed record per job (scripts that say
-- `--@include records` get this file pasted in; see keys_compact.py for the layout).
--
-- The records hash (`plc:{S:Q}:j`, passed where the original passes its job hash key prefix)
-- maps a local id (decimal) to cmsgpack.pack({bd, al, ar, ca, ua, cs, cd[, gr, gq[, ex[, dk]]]}):
--   bd  body                        al  attempts allowed      ar  attempts remaining
--   ca  created at, integer ms      ua  updated at, stored as ms after ca (ua - ca)
--   cs  custom status ('' if none)  cd  claim descriptor, or false if the job has no claim
--   gr  the job's ordered group (groupKey), only for a job of a group (lib/groups.lua), and
--   gq  its place in the group's FIFO: its id (builds before this one gave a job put back by
--       retry_failed_jobs.lua a later number, from the id counter: it keeps that place)
--   ex  the job's expiry (expireAtTimestampMillis), integer ms, only for a job that has one
--       (then gr and gq are false for a job of no group)
--   dk  the job's dedup key, only for a job that has one (then gr, gq and ex are false where
--       the job has none): the job forgets its key's record when it ends (lib/dedup.lua,
--       forget_keys). Jobs of builds before this one have no dk; their keys are named by the
--       dedup ids hash (plc:{S:Q}:di) and forgotten by the dedup GC.
-- A job without a group has seven items, as before groups, so its record costs nothing more.
-- ua is kept as a delta so that a job never touched since its enqueue stores 0 (one byte of
-- msgpack, not nine): a record of a 100-byte body is then 124 bytes, which jemalloc keeps in its
-- 128-byte class instead of the 160 one. Readers get ua in ms since the epoch, as the other times.
-- A SUCCEEDED job's updated time is its score in the SUCCEEDED set, not its ua: a success that
-- appends no status leaves the record as the claim wrote it (ack_jobs.lua's common path, which
-- so writes no record at all), and lookups, scans and the move to the original layout read the
-- score. Builds before this one wrote ua = the score at every success, so either way agrees.
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

-- The items of a record, read straight after the array's one-byte header (0x97, 0x99 with a
-- group, 0x9a with an expiry, 0x9b with a dedup key) without the table cmsgpack.unpack would
-- build for the array: bd, al, ar, ca, ua (ms since the epoch), cs, cd, gr, gq, ex and dk, nil
-- where the record has none.
local function record_items(packed)
  local _, bd, al, ar, ca, ua, cs, cd, gr, gq, ex, dk = cmsgpack.unpack_limit(packed, 11, 1)
  return bd, al, ar, ca, ca + ua, cs, cd, gr or nil, gq or nil, ex or nil, dk
end

local function unpack_record(packed)
  local bd, al, ar, ca, ua, cs, cd, gr, gq, ex, dk = record_items(packed)
  return {bd = bd, al = al, ar = ar, ca = ca, ua = ua, cs = cs, cd = cd, gr = gr, gq = gq, ex = ex, dk = dk}
end

-- Records are built by concatenation, not by cmsgpack.pack of a table: in Redis' Lua every table
-- and every call of a C function costs thousands of instructions, and packing a table cost
-- about 9,000 a record. The items besides the body are mostly a few values per batch (its now,
-- attempts, an empty status, one claim): each is packed once per script call (`packed_of`), and
-- the body gets the string header of its length. The bytes are what cmsgpack.pack of the array
-- gives (it encodes each item as it encodes it alone), so every build reads them.
local packed_of, str_header_of, new_tails = {}, {}, {}

-- One item (not nil: an absent item is false), packed once per script call.
local function packed(value)
  local bytes = packed_of[value]
  if not bytes then
    bytes = cmsgpack.pack(value)
    packed_of[value] = bytes
  end
  return bytes
end

-- The msgpack header of a string of n bytes (fixstr, str8, str16 or str32, as cmsgpack writes).
local function str_header(n)
  local header = str_header_of[n]
  if header then
    return header
  end
  if n < 32 then
    header = string.char(0xa0 + n)
  elseif n < 0x100 then
    header = '\217' .. string.char(n)
  elseif n < 0x10000 then
    header = '\218' .. string.char(math.floor(n / 0x100), n % 0x100)
  else
    header = '\219' .. string.char(math.floor(n / 0x1000000), math.floor(n / 0x10000) % 0x100,
      math.floor(n / 0x100) % 0x100, n % 0x100)
  end
  str_header_of[n] = header
  return header
end

-- The packed item of a string not worth keeping per script call (a dedup key, a group: about one
-- per job), made without the C call and the table entry of `packed`.
local function packed_string(text)
  return (str_header_of[#text] or str_header(#text)) .. text
end

-- The record of items as record_items gives them (ua in ms since the epoch; cs a string; cd
-- false for no claim; gr with gq, or neither; ex, or nil; dk, or nil).
local function record_of(bd, al, ar, ca, ua, cs, cd, gr, gq, ex, dk)
  local p = packed_of
  if dk then
    local since = ua - ca
    return '\155' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. (p[al] or packed(al)) .. (p[ar] or packed(ar))
      .. (p[ca] or packed(ca)) .. (p[since] or packed(since)) .. (p[cs] or packed(cs)) .. (p[cd] or packed(cd))
      .. (gr and packed_string(gr) .. cmsgpack.pack(gq) or '\194\194') .. (ex and packed(ex) or '\194') .. packed_string(dk)
  elseif ex then
    return '\154' .. str_header(#bd) .. bd .. packed(al) .. packed(ar) .. packed(ca) .. packed(ua - ca) .. packed(cs)
      .. packed(cd) .. packed(gr or false) .. packed(gq or false) .. packed(ex)
  elseif gr then  -- gq packed anew: a place is one job's, not worth keeping per script call
    local since = ua - ca
    return '\153' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. (p[al] or packed(al)) .. (p[ar] or packed(ar))
      .. (p[ca] or packed(ca)) .. (p[since] or packed(since)) .. (p[cs] or packed(cs)) .. (p[cd] or packed(cd))
      .. packed_string(gr) .. cmsgpack.pack(gq)
  end
  local since = ua - ca
  return '\151' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. (p[al] or packed(al)) .. (p[ar] or packed(ar))
    .. (p[ca] or packed(ca)) .. (p[since] or packed(since)) .. (p[cs] or packed(cs)) .. (p[cd] or packed(cd))
end

local function pack_record(job)
  return record_of(job.bd, job.al, job.ar, job.ca, job.ua, job.cs or '', job.cd or false, job.gr, job.gq, job.ex,
    job.dk)
end

-- The items from al to cd of a new job's record (PENDING, never touched: ua = ca, no claim) with
-- `attempts` allowed (and remaining: text, as an enqueue's ARGV gives it), status `cs` and created
-- at `ca` (ms), kept per (ca, attempts, status) for the script call.
local function new_tail(attempts, cs, ca)
  local by_attempts = new_tails[ca]
  if not by_attempts then
    by_attempts = {}
    new_tails[ca] = by_attempts
  end
  local by_status = by_attempts[attempts]
  if not by_status then
    by_status = {}
    by_attempts[attempts] = by_status
  end
  local tail = by_status[cs]
  if not tail then
    local al = packed(tonumber(attempts))
    tail = al .. al .. packed(ca) .. packed(0) .. packed(cs) .. packed(false)
    by_status[cs] = tail
  end
  return tail
end

-- The record of a new job of no group and no expiry, of body `bd` (new_tail for the rest):
-- pack_record's bytes, so a batch's jobs cost a concatenation each.
local function new_record(bd, attempts, cs, ca)
  local by_attempts = new_tails[ca]
  local by_status = by_attempts and by_attempts[attempts]
  local tail = by_status and by_status[cs] or new_tail(attempts, cs, ca)
  return '\151' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. tail
end

-- The record of a new job of group `gr` at place `gq` (a number), as new_record's: the group's
-- packed item is kept for the script call, the place is packed per job.
local function new_grouped_record(bd, attempts, cs, ca, gr, gq)
  return '\153' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. new_tail(attempts, cs, ca) .. packed_string(gr)
    .. cmsgpack.pack(gq)
end

-- new_keyed_record's bytes from new_tail's for the job (`tail`), which a batch that shares its
-- attempts, status and created time makes once (enqueue_keyed_jobs.lua's enqueue_fresh).
local function new_keyed_record_tailed(bd, tail, gr, gq, dk)
  local group = gr and packed_string(gr) .. cmsgpack.pack(gq) or '\194\194'  -- two falses
  return '\155' .. (str_header_of[#bd] or str_header(#bd)) .. bd .. tail .. group .. '\194'
    .. (str_header_of[#dk] or str_header(#dk)) .. dk
end

-- The record of a new job with dedup key `dk`, of group `gr` at place `gq` or of none (gr nil),
-- as new_record's.
local function new_keyed_record(bd, attempts, cs, ca, gr, gq, dk)
  return new_keyed_record_tailed(bd, new_tail(attempts, cs, ca), gr, gq, dk)
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
