--[[ gc_dedup_keys: as lua/gc_dedup_keys.lua, in the compact layout: forget up to ARGV[4] dedup
records that no longer hold their key: the window has passed and the job is finished or gone
(lua/lib/dedup.lua, lib/dedup_state.lua).

Looks at no more than ARGV[4] records, those whose gc score is at most now, lowest first. A
record whose job is still PENDING or IN_PROGRESS gets a later gc score (next_look), so the next
call looks at others; one whose held-until is still ahead is scored by it.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its field c
KEYS[2..4]  the dedup records, ids hash and gc set (plc:{S:Q}:dk, :di, :dg)
KEYS[5..]   four per priority 1..m: PENDING, SUCCEEDED and FAILED sets and the ready list
            (plc:{S:Q}:p{p}:s0, :s2, :s3, :r): priority p's start at 5 + 4 * (p - 1)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, ms
ARGV[4]     limit
ARGV[5]     m, the priorities whose keys are in KEYS

Returns how many records were forgotten; -1 if the queue does not exist; or {-2, p} (nothing
changed) if a record names a priority p > m: the caller calls again with m >= p.
]]
--@include dedup
--@include dedup_state
local meta_key = KEYS[1]
local records_key, ids_key, gc_key = KEYS[2], KEYS[3], KEYS[4]
local jobs = ARGV[2]
local now_ms, limit, m = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
if limit <= 0 then
  return 0
end
local due = redis.call('ZRANGEBYSCORE', gc_key, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
local looked = {}  -- per record due: {id, last look, key, value}
for i = 1, #due, 2 do  -- first, that no record names a priority beyond the keys passed
  local id = due[i]
  local key = redis.call('HGET', ids_key, id)
  local value = key and redis.call('HGET', records_key, key)
  local p = value and parse_holder(value)
  if p and p > m then
    return {-2, p}
  end
  looked[#looked + 1] = {id, tonumber(due[i + 1]), key, value}
end
local forgotten = 0
for _, r in ipairs(looked) do
  local id, last_look, key, value = r[1], r[2], r[3], r[4]
  local p, holder, until_ms
  if value then
    p, holder, until_ms = parse_holder(value)
  end
  if holder ~= id then  -- a stray entry (no record names this id): dropped, not counted
    redis.call('ZREM', gc_key, id)
    if key then
      redis.call('HDEL', ids_key, id)
    end
  elseif until_ms > now_ms then
    redis.call('ZADD', gc_key, until_ms, id)
  elseif job_active(jobs, 5 + DEDUP_GROUP * (p - 1), id) then
    redis.call('ZADD', gc_key, next_look(now_ms, last_look), id)
  else
    forget_record(records_key, ids_key, gc_key, key, id)
    forgotten = forgotten + 1
  end
end
return forgotten
