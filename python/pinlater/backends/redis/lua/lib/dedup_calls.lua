-- dedup_calls: the bodies of enqueue_keyed_jobs.lua and gc_dedup_keys.lua, the same in both
-- layouts once each has checked its queue exists (scripts that say `--@include dedup_calls` get
-- this file pasted in, after insert, dedup and the layout's dedup_state, whose functions it uses).

-- enqueue_keyed_jobs.lua's work: ARGV as that script documents it (`stride` per job from
-- ARGV[7], 7 in the original layout); `first_set` is the KEYS index of priority 1's first set,
-- `ready_offset` insert_jobs' (nil without ready lists). The compact layout passes `keyed(a)`,
-- whether the job at ARGV[a] has a dedup key (else every job has one), and insert_jobs' `place`.
-- `inserted`, when given, is called as inserted(a, id) for each job inserted (an expiry's writes).
-- `in_records`: the job records keep their keys (the compact layout's `place` sets job.dk), so
-- the holders write no id or gc entries (lib/dedup.lua).
-- Returns the script's reply.
local function enqueue_dedup(counter_key, records_key, ids_key, gc_key, runs_key, jobs, now, now_ms, n, m, first_set,
                             ready_offset, stride, keyed, place, inserted, in_records)
  stride = stride or 7
  local out = {}
  local taken, taken_at, old = {}, {}, {}  -- ARGV start and reply place of each job inserted; old holders
  -- The records of the call's keys, one HMGET per chunk (the keys are distinct, and nothing
  -- below writes a record before record_holders).
  local keys, key_at = {}, {}
  for j = 1, n do
    local a = 7 + stride * (j - 1)
    if not keyed or keyed(a) then
      keys[#keys + 1] = ARGV[a + 5]
      key_at[j] = #keys
    end
  end
  local values = {}
  if #keys <= 1000 then
    values = #keys > 0 and redis.call('HMGET', records_key, unpack(keys)) or values
  else
    for i = 1, #keys, 1000 do
      local last = math.min(i + 999, #keys)
      local got = redis.call('HMGET', records_key, unpack(keys, i, last))
      for k = i, last do
        values[k] = got[k - i + 1]
      end
    end
  end
  for j = 1, n do
    local a = 7 + stride * (j - 1)
    local value = key_at[j] and values[key_at[j]]
    local held = false
    if value then
      local p, id, until_ms = parse_holder(value)
      if p > m then
        return {-2, p}
      end
      if now_ms < until_ms or job_active(jobs, first_set + DEDUP_GROUP * (p - 1), id) then
        out[3 * j - 2], out[3 * j - 1], out[3 * j] = p, tonumber(id), 1
        held = true
      else
        old[#old + 1] = id
      end
    end
    if not held then
      taken[#taken + 1] = a
      taken_at[#taken_at + 1] = j
    end
  end
  for _, id in ipairs(old) do  -- the old holders lose their entries; their records are rewritten below
    redis.call('HDEL', ids_key, id)
    redis.call('ZREM', gc_key, id)
  end
  local ids, id_texts = insert_jobs(counter_key, jobs, now, taken, ready_offset, place)
  local holders = new_holders(records_key, not in_records and ids_key or nil, runs_key)
  local priorities = {}  -- per PENDING set index (ARGV text): its priority
  for i, id in ipairs(ids) do
    local a, j = taken[i], taken_at[i]
    local priority = priorities[ARGV[a]]
    if not priority then
      priority = (tonumber(ARGV[a]) - first_set) / DEDUP_GROUP + 1
      priorities[ARGV[a]] = priority
    end
    local id_text = id_texts and id_texts[i] or string.format('%d', id)
    if key_at[j] then
      holders.take(ARGV[a + 5], priority, id_text, id, ARGV[a + 6], now_ms)
    end
    if inserted then
      inserted(a, id_text)
    end
    out[3 * j - 2], out[3 * j - 1], out[3 * j] = priority, id, 0
  end
  holders.write()
  return out
end

-- gc_dedup_keys.lua's work, after its queue check: looks at the due entries of the gc set and
-- the runs (lib/dedup.lua) together, lowest score first, reading at most `limit` ids (a run
-- counts its ids; one that does not fit is split, its ids beyond the limit kept due as a run of
-- their own). Each record an entry stands for is forgotten if its held-until has passed and its
-- job is gone; an entry whose records are all forgotten goes, one with records left is looked
-- at again when the first of them may go (its held-until, or next_look while its job exists).
-- Ids an entry names but no record names back (never keyed, taken over, forgotten) are passed
-- over (a stray id entry is dropped). Returns how many records were forgotten.
local function gc_dedup(records_key, ids_key, gc_key, runs_key, jobs, now_ms, limit)
  if limit <= 0 then
    return 0
  end
  -- the due entries of both sets, merged by score: {set, member, score}
  local due = {}
  for _, set in ipairs({gc_key, runs_key}) do
    local page = redis.call('ZRANGEBYSCORE', set, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #page, 2 do
      due[#due + 1] = {set, page[i], tonumber(page[i + 1])}
    end
  end
  table.sort(due, function(x, y)
    if x[3] ~= y[3] then
      return x[3] < y[3]
    end
    if x[1] ~= y[1] then
      return x[1] < y[1]
    end
    return x[2] < y[2]
  end)
  local forgotten, read = 0, 0
  for _, entry in ipairs(due) do
    if read >= limit then
      break
    end
    local set, member = entry[1], entry[2]
    local deferred, deferred_key = parse_deferred(member)
    local ids, first = {}, nil
    if deferred then  -- forget_keys' entry: the record is forgotten if it still holds that value
      read = read + 1
      if redis.call('HGET', records_key, deferred_key) == deferred then
        local _, _, until_ms = parse_holder(deferred)
        if until_ms > now_ms then
          redis.call('ZADD', set, until_ms, member)
        else
          redis.call('HDEL', records_key, deferred_key)
          redis.call('ZREM', set, member)
          forgotten = forgotten + 1
        end
      else
        redis.call('ZREM', set, member)
      end
    else
      ids, first = gc_entry_ids(member)
    end
    if #ids > limit - read then  -- split: the ids beyond the limit stay due, a run of their own
      local take = limit - read
      redis.call('ZADD', set, entry[3], gc_entry(first + take, first + #ids - 1))
      for i = #ids, take + 1, -1 do
        ids[i] = nil
      end
      redis.call('ZREM', set, member)
      member = gc_entry(first, first + take - 1)
    end
    read = read + #ids
    local keys = #ids > 0 and redis.call('HMGET', ids_key, unpack(ids)) or {}
    local next_at = nil
    for i, id in ipairs(ids) do
      local key = keys[i]
      local value = key and redis.call('HGET', records_key, key)
      local holder, until_ms
      if value then
        local _
        _, holder, until_ms = parse_holder(value)
      end
      local at = nil
      if holder ~= id then
        if key then  -- an id entry no record names back: a stray, dropped
          redis.call('HDEL', ids_key, id)
        end
      elseif until_ms > now_ms then
        at = until_ms
      elseif job_exists(jobs, id) then  -- finished or not, its record stays while it exists
        at = next_look(now_ms, until_ms)
      else
        redis.call('HDEL', records_key, key)
        redis.call('HDEL', ids_key, id)
        forgotten = forgotten + 1
      end
      if at and (not next_at or at < next_at) then
        next_at = at
      end
    end
    if deferred then  -- done above
    elseif next_at then
      redis.call('ZADD', set, next_at, member)
    else
      redis.call('ZREM', set, member)
    end
  end
  return forgotten
end
