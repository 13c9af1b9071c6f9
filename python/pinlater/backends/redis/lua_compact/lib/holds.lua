-- holds: helpers shared by the compact scripts that say `--@include holds` (after
-- `--@include sets`, whose helpers these use; scripts.py pastes both files in).
--
-- As lua/lib/holds.lua, in the compact layout: the dequeue broker's holds (reserve_jobs.lua). A
-- held job is out of its PENDING set, in three structures of its priority that always name the
-- same ids:
--   held set     (plc:{S:Q}:p{p}:h, sorted set)  member: id, score: the job's run after in ms, as
--                                                in PENDING, so counts, scans and lookups merge
--                                                it back as PENDING;
--   expiry set   (plc:{S:Q}:p{p}:x, sorted set)  member: id, score: when the hold lapses, in ms;
--   holders hash (plc:{S:Q}:p{p}:o, hash)        field: id, value: the reservation that holds it.
-- A hold is live while its expiry is after now. sweep_lapsed puts lapsed holds back in PENDING
-- with their run-after score, so a holder that crashed needs no cleanup beyond the next sweep.
-- Unlike the original, the held scores of a batch are read with one ZMSCORE, not a ZSCORE each.

-- Forget the holds on `ids` (present or not) in all three structures.
local function drop_holds(held_key, expiry_key, holders_key, ids)
  zrem_all(held_key, ids)
  zrem_all(expiry_key, ids)
  for i = 1, #ids, SET_CHUNK do
    redis.call('HDEL', holders_key, unpack(ids, i, math.min(i + SET_CHUNK - 1, #ids)))
  end
end

-- End the holds on `ids` (present or not): back in PENDING with their run-after scores.
local function unhold(pending_key, held_key, expiry_key, holders_key, ids)
  local scores = scores_of(held_key, ids)
  local back, seen = {}, {}
  for _, id in ipairs(ids) do
    if scores[id] and not seen[id] then
      seen[id] = true
      back[#back + 1] = scores[id]
      back[#back + 1] = id
    end
  end
  drop_holds(held_key, expiry_key, holders_key, ids)
  zadd_pairs(pending_key, back)
end

-- Put every hold that lapsed by `now` (ms) back in PENDING with its run-after score. Returns
-- how many.
local function sweep_lapsed(pending_key, held_key, expiry_key, holders_key, now)
  local swept = 0
  while true do
    local ids = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, SET_CHUNK)
    if #ids == 0 then
      return swept
    end
    unhold(pending_key, held_key, expiry_key, holders_key, ids)
    swept = swept + #ids
    if #ids < SET_CHUNK then
      return swept
    end
  end
end
