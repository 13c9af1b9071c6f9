--[[ gc_finished_jobs: delete up to ARGV[4] jobs of a final state that finished before ARGV[3].

As lua/gc_finished_jobs.lua: oldest first (SUCCEEDED / FAILED score < ARGV[3]); each job's record
goes with it (one HDEL per chunk of records, not a DEL per job). KEYS[1] is the queue's meta hash
and ARGV[2] the records hash.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  SUCCEEDED or FAILED sorted set (plc:{S:Q}:p{p}:s2 or :s3)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  finished before, seconds as float (exclusive)
ARGV[4]  limit

Returns how many jobs were deleted, or -1 if the queue does not exist.
]]
--@include records
local meta_key, set_key = KEYS[1], KEYS[2]
local records_key, before, limit = ARGV[2], bound_ms('(' .. ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
if limit <= 0 then
  return 0
end
local ids = redis.call('ZRANGEBYSCORE', set_key, '-inf', before, 'LIMIT', 0, limit)
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', set_key, 0, #ids - 1)
end
delete_records(records_key, ids)
return #ids
