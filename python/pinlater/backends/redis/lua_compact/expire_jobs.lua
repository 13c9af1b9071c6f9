--[[ expire_jobs: as lua/expire_jobs.lua, in the compact layout (ShardStore.expire_jobs).

Up to ARGV[4] PENDING jobs whose expiry has come, soonest first, from the queue's expiry index
(keys_compact.py: member id, score expiry in ms), each entry due taken out of the index. A job
PENDING in one of priorities 1..m (its PENDING set, held by the dequeue broker: the hold is
dropped, or waiting in its ordered group) ends FAILED scored by now: ar 0, claim cleared, ua =
now, "expired" appended to cs, the expired count one up; it leaves its group as a final failure
does, and forgets its dedup key (lib/dedup.lua, forget_keys). An entry whose job is not PENDING
is only dropped. At most 4 * ARGV[4] entries are looked
at.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     expiry index (plc:{S:Q}:xe)
KEYS[3]     expired count (plc:{S:Q}:xn)
KEYS[4..]   six per priority 1..m: PENDING and FAILED sets, held set, hold expiry set, holders
            hash, waiting set (plc:{S:Q}:p{p}:s0, :s3, :h, :x, :o, :w): priority p's at 4 + 6 * (p - 1)
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, seconds as float
ARGV[4]     limit
ARGV[5]     m
after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail).

Returns how many jobs expired, or -1 if the queue does not exist.
]]
--@include records
--@include sets
--@include holds
--@include groups
--@include cut_chars
--@include ended
--@include dedup
local meta_key, index_key, count_key = KEYS[1], KEYS[2], KEYS[3]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local limit, m = tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local rules = rules_tail(5)
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
local expired, looked = 0, 0
while expired < limit and looked < 4 * limit do
  local ids = redis.call('ZRANGEBYSCORE', index_key, '-inf', now, 'LIMIT', 0, math.min(limit - expired, 1000))
  if #ids == 0 then
    break
  end
  zrem_all(index_key, ids)
  looked = looked + #ids
  for _, id in ipairs(ids) do
    local job = read_records(records_key, {id})[id]
    for p = 1, job and m or 0 do
      local k = 4 + 6 * (p - 1)
      local pending = redis.call('ZSCORE', KEYS[k], id)
      local held = not pending and redis.call('ZSCORE', KEYS[k + 2], id)
      local waiting = not pending and not held and redis.call('ZSCORE', KEYS[k + 5], id)
      if pending or held or waiting then
        if job.gr and not rules then
          return redis.error_reply('ERR a job of an ordered group expired without the group keys')
        end
        if pending then
          redis.call('ZREM', KEYS[k], id)
        elseif held then
          drop_holds(KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], {id})
        else
          redis.call('ZREM', KEYS[k + 5], id)
        end
        redis.call('ZADD', KEYS[k + 1], now, id)
        job.ar, job.cd, job.ua = 0, false, now
        job.cs = ended_status(job.cs, EXPIRED, CUSTOM_STATUS_LIMIT)
        redis.call('HSET', records_key, id, pack_record(job))
        if job.gr and waiting then
          drop_waiting(rules, job.gr, job, id, p, now)
        elseif job.gr then
          leave_group(rules, job.gr, now)
        end
        if job.dk then
          forget_keys(dedup_records_key, dedup_runs_key, {id}, {job.dk}, {job.ca}, now)
        end
        expired = expired + 1
        break
      end
    end
  end
end
if expired > 0 then
  redis.call('INCRBY', count_key, expired)
end
return expired
