--[[ ack_jobs: apply a batch of success and failure acks, of any priorities, in one call.

Only a job in its priority's IN_PROGRESS set changes; any other ack is a no-op (clients resend
acks they think were lost). Success: to SUCCEEDED scored by now. Failure with more than one
attempt remaining: to PENDING scored by its retry time, one attempt less, claim removed. Failure
with one or none left: to FAILED scored by now, none remaining (the claim is kept for lookups).
Every acked job gets ua = now and the status appended to cs, cut to ARGV[3] characters.
A member whose hash is gone (evicted) is removed and counted.

Cancel and expiry (ShardStore.cancel_jobs, "Expiry"): a failure of a cancelled job (ar 0) ends
it FAILED with "cancelled" appended after the ack's status; a failure with attempts left whose
retry time is at or after the job's expiry (ex, ms) ends it FAILED with "expired" appended (and
the expired count one up). A job with an expiry that finishes leaves the expiry index.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[3]     expired count (pld_{shard}_{queue}.n)
KEYS[4..n]  four sorted sets per acked priority, in state order: PENDING, IN_PROGRESS,
            SUCCEEDED, FAILED (plq_{shard}_{queue}.p{p}_s0 .. _s3)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     custom status limit, in characters
ARGV[4]     now, seconds as float
ARGV[5]     number of acks, n
then 5 per ack:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id
  ARGV[i+2] 's' for success, 'f' for failure
  ARGV[i+3] status to append
  ARGV[i+4] retry time for a failure, seconds as float (now + retry delay)

Hash fields: ar ua cs cd ex (keys.JobField).
Returns {changed, evicted}, or -1 if the queue does not exist.
]]
--@include cut_chars
--@include ended

local names_key, expiry_index_key, expired_count_key = KEYS[1], KEYS[2], KEYS[3]
local queue, hash_prefix, status_limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now, n = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
-- Members to add, per KEYS index: {score, id, ...}; one ZADD per set at the end, not per job.
local scored = {}
local function add(k, score, id)
  local pairs_of_set = scored[k]
  if not pairs_of_set then
    pairs_of_set = {}
    scored[k] = pairs_of_set
  end
  pairs_of_set[#pairs_of_set + 1] = score
  pairs_of_set[#pairs_of_set + 1] = id
end

local changed, evicted = 0, 0
for j = 0, n - 1 do
  local a = 6 + 5 * j
  local k = tonumber(ARGV[a])  -- PENDING; IN_PROGRESS, SUCCEEDED and FAILED follow
  local id, kind, append, retry_at = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  if redis.call('ZREM', KEYS[k + 1], id) == 1 then
    local hash_key = hash_prefix .. id
    local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'cs', 'ex')
    if not job[1] or not job[2] then
      redis.call('DEL', hash_key)
      evicted = evicted + 1
    else
      local status = cut_chars((job[4] or '') .. append, status_limit)
      local ex = job[5]
      local finished = true
      if kind == 's' then
        add(k + 2, now, id)
        redis.call('HSET', hash_key, 'ua', now, 'cs', status)
      else
        local remaining = tonumber(job[3]) or 0
        if remaining > 1 and not expired_at(ex, ms_of(retry_at)) then
          add(k, retry_at, id)
          redis.call('HDEL', hash_key, 'cd')
          redis.call('HSET', hash_key, 'ar', remaining - 1, 'ua', now, 'cs', status)
          finished = false
        else
          if remaining == 0 then
            status = ended_status(status, CANCELLED, status_limit)
          elseif remaining > 1 then
            status = ended_status(status, EXPIRED, status_limit)
            redis.call('INCR', expired_count_key)
          end
          add(k + 3, now, id)
          redis.call('HSET', hash_key, 'ar', 0, 'ua', now, 'cs', status)
        end
      end
      if ex and finished then
        redis.call('ZREM', expiry_index_key, id)
      end
      changed = changed + 1
    end
  end
end
for k, pairs_of_set in pairs(scored) do
  -- unpack stays far below Lua's C stack limit (8000) in chunks of 1000 members
  for i = 1, #pairs_of_set, 2000 do
    redis.call('ZADD', KEYS[k], unpack(pairs_of_set, i, math.min(i + 1999, #pairs_of_set)))
  end
end
return {changed, evicted}
