-- dedup_calls: the bodies of enqueue_keyed_jobs.lua and gc_dedup_keys.lua, the same in both
-- layouts once each has checked its queue exists (scripts that say `--@include dedup_calls` get
-- this file pasted in, after insert, dedup and the layout's dedup_state, whose functions it uses).

-- enqueue_keyed_jobs.lua's work: ARGV as that script documents it (`stride` per job from
-- ARGV[7], 7 in the original layout); `first_set` is the KEYS index of priority 1's first set,
-- `ready_offset` insert_jobs' (nil without ready lists). The compact layout passes `keyed(a)`,
-- whether the job at ARGV[a] has a dedup key (else every job has one), and insert_jobs' `place`.
-- `inserted`, when given, is called as inserted(a, id) for each job inserted (an expiry's writes).
-- Returns the script's reply.
local function enqueue_dedup(counter_key, records_key, ids_key, gc_key, jobs, now, now_ms, n, m, first_set, ready_offset,
                             stride, keyed, place, inserted)
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
  local holders = new_holders(records_key, ids_key, gc_key)
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
      holders.take(ARGV[a + 5], priority, id_text, ARGV[a + 6], now_ms)
    end
    if inserted then
      inserted(a, id_text)
    end
    out[3 * j - 2], out[3 * j - 1], out[3 * j] = priority, id, 0
  end
  holders.write()
  return out
end

-- gc_dedup_keys.lua's work, after its queue check. Returns the reply.
local function gc_dedup(records_key, ids_key, gc_key, jobs, now_ms, limit)
  if limit <= 0 then
    return 0
  end
  local due = redis.call('ZRANGEBYSCORE', gc_key, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
  local forgotten = 0
  for i = 1, #due, 2 do
    local id, last_look = due[i], tonumber(due[i + 1])
    local key = redis.call('HGET', ids_key, id)
    local value = key and redis.call('HGET', records_key, key)
    local holder, until_ms
    if value then
      local _
      _, holder, until_ms = parse_holder(value)
    end
    if holder ~= id then  -- a stray entry (no record names this id): dropped, not counted
      redis.call('ZREM', gc_key, id)
      if key then
        redis.call('HDEL', ids_key, id)
      end
    elseif until_ms > now_ms then
      redis.call('ZADD', gc_key, until_ms, id)
    elseif job_exists(jobs, id) then  -- finished or not, its record stays while it exists
      redis.call('ZADD', gc_key, next_look(now_ms, last_look), id)
    else
      forget_record(records_key, ids_key, gc_key, key, id)
      forgotten = forgotten + 1
    end
  end
  return forgotten
end
