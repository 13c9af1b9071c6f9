--[[ resurrect_timed_out_jobs: treat up to ARGV[4] jobs claimed before ARGV[3] as failed with
no retry delay (the monitor's claim timeout).

Oldest claims first (IN_PROGRESS score < ARGV[3]). With more than one attempt remaining: to
PENDING scored by now, one attempt less, claim removed. Otherwise: to FAILED scored by now, none
remaining. ua = now. A member whose hash is gone (evicted) is removed and counted. Holds of the
dequeue broker that lapsed by ARGV[5] go back to PENDING first (lib/holds.lua): the monitor is
what returns the holds of a server that crashed when nothing else touches the queue.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  PENDING sorted set (plq_{shard}_{queue}.p{p}_s0)
KEYS[3]  IN_PROGRESS sorted set (plq_{shard}_{queue}.p{p}_s1)
KEYS[4]  FAILED sorted set (plq_{shard}_{queue}.p{p}_s3)
KEYS[5]  held sorted set (plq_{shard}_{queue}.p{p}_h)
KEYS[6]  hold expiry sorted set (plq_{shard}_{queue}.p{p}_x)
KEYS[7]  holders hash (plq_{shard}_{queue}.p{p}_o)
KEYS[8]  expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[9]  expired count (pld_{shard}_{queue}.n)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  claimed before, seconds as float (exclusive)
ARGV[4]  limit
ARGV[5]  now, seconds as float

A cancelled job (ar 0) ends FAILED with "cancelled" appended to cs; one with attempts left
whose expiry (ex, ms) is at or before now ends FAILED with "expired" appended (the expired count
one up). A job with an expiry that finishes leaves the expiry index.

Hash fields: bd al ar ua cd cs ex (keys.JobField).
Returns {changed, evicted, failed} (failed: of the changed, those that ended FAILED), or -1 if the
queue does not exist.
]]
--@include holds
--@include cut_chars
--@include ended
local expiry_index_key, expired_count_key = KEYS[8], KEYS[9]
local names_key, pending_key, in_progress_key, failed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local queue, hash_prefix, before = ARGV[1], ARGV[2], ARGV[3]
local limit, now = tonumber(ARGV[4]), ARGV[5]
local now_ms = ms_of(now)
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
sweep_lapsed(pending_key, KEYS[5], KEYS[6], KEYS[7], now)
if limit <= 0 then
  return {0, 0, 0}
end
local ids = redis.call('ZRANGEBYSCORE', in_progress_key, '-inf', '(' .. before, 'LIMIT', 0, limit)
local changed, evicted, failed = 0, 0, 0
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', in_progress_key, 0, #ids - 1)
end
for _, id in ipairs(ids) do
  local hash_key = hash_prefix .. id
  local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'ex')
  if not job[1] or not job[2] then
    redis.call('DEL', hash_key)
    evicted = evicted + 1
  else
    local remaining = tonumber(job[3]) or 0
    local ex = job[4]
    if remaining > 1 and not expired_at(ex, now_ms) then
      redis.call('ZADD', pending_key, now, id)
      redis.call('HDEL', hash_key, 'cd')
      redis.call('HSET', hash_key, 'ar', remaining - 1, 'ua', now)
    else
      redis.call('ZADD', failed_key, now, id)
      failed = failed + 1
      redis.call('HSET', hash_key, 'ar', 0, 'ua', now)
      if remaining == 0 or remaining > 1 then
        local status = redis.call('HGET', hash_key, 'cs')
        local word = remaining == 0 and CANCELLED or EXPIRED
        redis.call('HSET', hash_key, 'cs', ended_status(status, word, CUSTOM_STATUS_LIMIT))
        if word == EXPIRED then
          redis.call('INCR', expired_count_key)
        end
      end
      if ex then
        redis.call('ZREM', expiry_index_key, id)
      end
    end
    changed = changed + 1
  end
end
return {changed, evicted, failed}
