--[[ cancel_jobs: cancel jobs by (priority, local id) (ShardStore.cancel_jobs).

A PENDING job (in its PENDING set, or held by the dequeue broker: its hold is dropped) ends
FAILED scored by now: ar 0, claim removed, ua = now, "cancelled" appended to cs (lib/ended.lua),
out of the expiry index. An IN_PROGRESS job with attempts remaining gets ar 0 and nothing else:
its failure ack or claim timeout ends it FAILED the same way, its success ack still counts
(ack_jobs.lua, resurrect_timed_out_jobs.lua, checkpoint_jobs.lua). Anything else (finished, an
IN_PROGRESS job already cancelled, missing, a job whose hash is gone) is left alone and not
counted. Dedup keys need nothing: a FAILED job holds its key by its window only
(lib/dedup_state.lua reads the state from the sets).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[3..n]  six per priority named: PENDING, IN_PROGRESS and FAILED sets, held set, hold
            expiry set, holders hash (plq_{shard}_{queue}.p{p}_s0, _s1, _s3, _h, _x, _o)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     custom status limit, in characters
ARGV[4]     now, seconds as float
ARGV[5]     number of jobs, n
then 2 per job:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other five follow)
  ARGV[i+1] local id

Hash fields: bd al ar ua cs cd ex (keys.JobField).
Returns how many jobs changed, or -1 if the queue does not exist.
]]
--@include holds
--@include cut_chars
--@include ended
local names_key, expiry_index_key = KEYS[1], KEYS[2]
local queue, hash_prefix, status_limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now, n = ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local changed = 0
for j = 0, n - 1 do
  local a = 6 + 2 * j
  local k, id = tonumber(ARGV[a]), ARGV[a + 1]
  local hash_key = hash_prefix .. id
  local pending = redis.call('ZSCORE', KEYS[k], id)
  local held = not pending and redis.call('ZSCORE', KEYS[k + 3], id)
  if pending or held then
    local job = redis.call('HMGET', hash_key, 'bd', 'al', 'cs', 'ex')
    if job[1] and job[2] then  -- an evicted job is left to the next script that meets it
      if held then
        drop_holds(KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], {id})
      else
        redis.call('ZREM', KEYS[k], id)
      end
      redis.call('ZADD', KEYS[k + 2], now, id)
      redis.call('HDEL', hash_key, 'cd')
      redis.call('HSET', hash_key, 'ar', 0, 'ua', now, 'cs', ended_status(job[3], CANCELLED, status_limit))
      if job[4] then
        redis.call('ZREM', expiry_index_key, id)
      end
      changed = changed + 1
    end
  elseif redis.call('ZSCORE', KEYS[k + 1], id) then
    local remaining = tonumber(redis.call('HGET', hash_key, 'ar'))
    if remaining and remaining > 0 then
      redis.call('HSET', hash_key, 'ar', 0)
      changed = changed + 1
    end
  end
end
return changed
