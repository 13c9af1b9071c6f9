-- schedules: the shard's schedules (ShardStore.put_schedule and the rest), the same in both
-- layouts (each layout's {put,delete,list,due,advance}_schedule(s).lua include this file and
-- call one function). Three keys per shard, under one hash tag in the compact layout (the queue
-- names set's), so each call touches one slot and a Redis Cluster shard keeps them:
--   definitions  (hash)        field '{queue}:{name}' (queue names are \w+: the first ':' ends
--                              it), value '{next_run_ms}|{paused 0/1}|{spec}';
--   due          (sorted set)  member the same field, score next_run_ms, for unpaused ones
--                              only: due_schedules reads its head, never every schedule;
--   index        (sorted set)  member the same field, score 0, for every schedule: a queue's
--                              schedules are one ZRANGEBYLEX range ('[q:' to '(q;').
-- The queue names set (KEYS[1] where the queue matters) says whether the queue exists.

local schedules = {}

local function parse_definition(value)
  local next_run, paused, spec = string.match(value, '^(%-?%d+)|([01])|(.*)$')
  return next_run, paused, spec
end

-- KEYS: names, definitions, due, index; ARGV: queue, name, next_run_ms, paused ('0'/'1'), spec.
-- Returns 1, or -1 if the queue does not exist.
function schedules.put()
  local names_key, definitions_key, due_key, index_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
  local queue, name, next_run, paused, spec = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  if not redis.call('ZSCORE', names_key, queue) then
    return -1
  end
  local field = queue .. ':' .. name
  redis.call('HSET', definitions_key, field, next_run .. '|' .. paused .. '|' .. spec)
  redis.call('ZADD', index_key, 0, field)
  if paused == '1' then
    redis.call('ZREM', due_key, field)
  else
    redis.call('ZADD', due_key, next_run, field)
  end
  return 1
end

-- KEYS: definitions, due, index; ARGV: queue, then a name (that schedule), or none (every
-- schedule of the queue: delete_queue's, once the queue is unregistered). Returns how many went.
function schedules.delete()
  local definitions_key, due_key, index_key = KEYS[1], KEYS[2], KEYS[3]
  local queue, name = ARGV[1], ARGV[2]
  local fields
  if name then
    fields = {queue .. ':' .. name}
  else
    fields = redis.call('ZRANGEBYLEX', index_key, '[' .. queue .. ':', '(' .. queue .. ';')
  end
  local gone = 0
  for i = 1, #fields, 1000 do
    local chunk = {unpack(fields, i, math.min(i + 999, #fields))}
    gone = gone + redis.call('HDEL', definitions_key, unpack(chunk))
    redis.call('ZREM', due_key, unpack(chunk))
    redis.call('ZREM', index_key, unpack(chunk))
  end
  return gone
end

-- KEYS: names, definitions, index; ARGV: queue. Returns name, definition, name, ... by name
-- (empty for a missing queue).
function schedules.list()
  local names_key, definitions_key, index_key = KEYS[1], KEYS[2], KEYS[3]
  local queue = ARGV[1]
  local out = {}
  if not redis.call('ZSCORE', names_key, queue) then
    return out
  end
  local fields = redis.call('ZRANGEBYLEX', index_key, '[' .. queue .. ':', '(' .. queue .. ';')
  for i = 1, #fields, 1000 do
    local chunk = {unpack(fields, i, math.min(i + 999, #fields))}
    local values = redis.call('HMGET', definitions_key, unpack(chunk))
    for j, field in ipairs(chunk) do
      if values[j] then
        out[#out + 1] = string.sub(field, #queue + 2)
        out[#out + 1] = values[j]
      end
    end
  end
  return out
end

-- KEYS: definitions, due; ARGV: now_ms, limit, max_bytes. Returns field, definition, ... of the
-- unpaused schedules with next_run_ms <= now, earliest first, at most limit, and no more once
-- their definitions hold max_bytes (the first always). The lengths are read first (HSTRLEN
-- copies nothing): 500 definitions of 1.4 MB each read whole made a 700 MB reply.
function schedules.due()
  local definitions_key, due_key = KEYS[1], KEYS[2]
  local max_bytes = tonumber(ARGV[3])
  local fields = redis.call('ZRANGEBYSCORE', due_key, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
  local chosen, bytes = {}, 0
  for _, field in ipairs(fields) do
    local n = redis.call('HSTRLEN', definitions_key, field)
    if n > 0 then  -- (0: no definition, skipped)
      if #chosen > 0 and bytes + n > max_bytes then
        break
      end
      bytes = bytes + n
      chosen[#chosen + 1] = field
    end
  end
  local out = {}
  for i = 1, #chosen, 1000 do
    local chunk = {unpack(chosen, i, math.min(i + 999, #chosen))}
    local values = redis.call('HMGET', definitions_key, unpack(chunk))
    for j, field in ipairs(chunk) do
      if values[j] then
        out[#out + 1] = field
        out[#out + 1] = values[j]
      end
    end
  end
  return out
end

-- KEYS: definitions, due; ARGV: queue, name, expected next_run_ms, new next_run_ms (integers as
-- decimal text). Moves next_run only if it is still the expected one. Returns 1 if it moved.
function schedules.advance()
  local definitions_key, due_key = KEYS[1], KEYS[2]
  local field = ARGV[1] .. ':' .. ARGV[2]
  local expected, next_run = ARGV[3], ARGV[4]
  local value = redis.call('HGET', definitions_key, field)
  if not value then
    return 0
  end
  local current, paused, spec = parse_definition(value)
  if current ~= expected then
    return 0
  end
  redis.call('HSET', definitions_key, field, next_run .. '|' .. paused .. '|' .. spec)
  if paused == '0' then
    redis.call('ZADD', due_key, next_run, field)
  end
  return 1
end
