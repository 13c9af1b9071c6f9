-- holds: helpers shared by the scripts that say `--@include holds` (scripts.py pastes this file
-- there before the script is loaded).
--
-- The dequeue broker's holds (reserve_jobs.lua). A held job is out of its PENDING set, in three
-- structures of its priority that always name the same ids:
--   held set     (..._h, sorted set)  member: id, score: the job's run after, as in PENDING,
--                                     so counts, scans and lookups merge it back as PENDING;
--   expiry set   (..._x, sorted set)  member: id, score: when the hold lapses;
--   holders hash (..._o, hash)        field: id, value: the reservation that holds it.
-- A hold is live while its expiry is after now. sweep_lapsed puts lapsed holds back in PENDING
-- with their run-after score, so a holder that crashed needs no cleanup beyond the next sweep.

-- Variadic commands in chunks below Lua's unpack limit: one command per chunk, not per member.
local function zrem_all(key, members)
  for i = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

-- `pairs` is flat: score, member, score, member, ...
local function zadd_pairs(key, pairs)
  for i = 1, #pairs, 2000 do
    redis.call('ZADD', key, unpack(pairs, i, math.min(i + 1999, #pairs)))
  end
end

-- Every member scored by the same score.
local function zadd_all(key, score, members)
  for i = 1, #members, 1000 do
    local args = {}
    for m = i, math.min(i + 999, #members) do
      args[#args + 1] = score
      args[#args + 1] = members[m]
    end
    redis.call('ZADD', key, unpack(args))
  end
end

-- Forget the holds on `ids` (present or not) in all three structures.
local function drop_holds(held_key, expiry_key, holders_key, ids)
  zrem_all(held_key, ids)
  zrem_all(expiry_key, ids)
  for i = 1, #ids, 1000 do
    redis.call('HDEL', holders_key, unpack(ids, i, math.min(i + 999, #ids)))
  end
end

-- End the holds on `ids` (present or not): back in PENDING with their run-after scores.
local function unhold(pending_key, held_key, expiry_key, holders_key, ids)
  local back = {}
  for _, id in ipairs(ids) do
    local score = redis.call('ZSCORE', held_key, id)
    if score then
      back[#back + 1] = score
      back[#back + 1] = id
    end
  end
  drop_holds(held_key, expiry_key, holders_key, ids)
  zadd_pairs(pending_key, back)
end

-- Put every hold that lapsed by `now` back in PENDING with its run-after score. Returns how many.
local function sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  local swept = 0
  while true do
    local ids = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, 1000)
    if #ids == 0 then
      return swept
    end
    unhold(pending_key, held_key, expiry_key, holders_key, ids)
    swept = swept + #ids
    if #ids < 1000 then
      return swept
    end
  end
end
