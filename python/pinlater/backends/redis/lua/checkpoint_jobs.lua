--[[ checkpoint_jobs: apply a batch of checkpoints, each guarded by state and claim.

A checkpoint applies only while the job is in its priority's IN_PROGRESS set and its claim (cd)
contains the source as a plain substring (string.find with plain = true: unlike the original's
string.match, no character of the source is a pattern). Then, as asked: the body is replaced,
attempts allowed and remaining are both set, a status is prepended to cs (cut to ARGV[4]
characters). With move-to-pending the job goes to PENDING scored by its run-after time and loses
its claim; otherwise it stays IN_PROGRESS re-scored by its run-after time, which extends the
claim: to when the claim timeout counts from (a long job's lease, as the original's checkpoint
gave it; the handler sends now when the request gives none). ua = the run-after time either way,
as the original wrote it. A member whose hash is gone (evicted) is removed and counted.

A cancelled job (ar 0, ShardStore.cancel_jobs) keeps ar 0: attempts to allow set al only, and
a move to PENDING ends it FAILED (scored by now, claim kept as a failure ack keeps it) with
"cancelled" appended to cs. A job with an expiry (ex) moved to PENDING is put back in the
expiry index.

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     expiry index (pld_{shard}_{queue}.e, keys.py)
KEYS[3..n]  four sorted sets per priority involved, in state order: PENDING, IN_PROGRESS,
            SUCCEEDED, FAILED (plq_{shard}_{queue}.p{p}_s0 .. _s3)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     source that must appear in the claim
ARGV[4]     custom status limit, in characters
ARGV[5]     now, seconds as float
ARGV[6]     number of checkpoints, n
then 9 per checkpoint:
  ARGV[i]   index into KEYS of the PENDING set of the job's priority (the other three follow)
  ARGV[i+1] local id
  ARGV[i+2] '1' to move to PENDING, else '0'
  ARGV[i+3] run after, seconds as float (the PENDING score, or the IN_PROGRESS one, and ua)
  ARGV[i+4] '1' if a new body follows, else '0'
  ARGV[i+5] new body
  ARGV[i+6] attempts to allow, or '' to keep them
  ARGV[i+7] '1' if a status to prepend follows, else '0'
  ARGV[i+8] status to prepend

Hash fields: bd al ar ua cs cd ex (keys.JobField).
Returns {changed, evicted}, or -1 if the queue does not exist.
]]
--@include cut_chars
--@include ended

local names_key, expiry_index_key = KEYS[1], KEYS[2]
local queue, hash_prefix, source = ARGV[1], ARGV[2], ARGV[3]
local status_limit, now, n = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local changed, evicted = 0, 0
for j = 0, n - 1 do
  local a = 7 + 9 * j
  local k = tonumber(ARGV[a])
  local pending_key, in_progress_key = KEYS[k], KEYS[k + 1]
  local id = ARGV[a + 1]
  if redis.call('ZSCORE', in_progress_key, id) then
    local hash_key = hash_prefix .. id
    local job = redis.call('HMGET', hash_key, 'bd', 'al', 'cs', 'cd', 'ar', 'ex')
    if not job[1] or not job[2] then
      redis.call('ZREM', in_progress_key, id)
      redis.call('DEL', hash_key)
      evicted = evicted + 1
    elseif job[4] and string.find(job[4], source, 1, true) then
      if ARGV[a + 4] == '1' then
        redis.call('HSET', hash_key, 'bd', ARGV[a + 5])
      end
      local cancelled = tonumber(job[5]) == 0
      if ARGV[a + 6] ~= '' then
        if cancelled then
          redis.call('HSET', hash_key, 'al', ARGV[a + 6])
        else
          redis.call('HSET', hash_key, 'al', ARGV[a + 6], 'ar', ARGV[a + 6])
        end
      end
      local status = job[3] or ''
      if ARGV[a + 7] == '1' then
        status = cut_chars(ARGV[a + 8] .. status, status_limit)
        redis.call('HSET', hash_key, 'cs', status)
      end
      local updated = ARGV[a + 3]  -- (the original's: the run after given, else now)
      if ARGV[a + 2] == '1' and cancelled then
        updated = now
        redis.call('ZREM', in_progress_key, id)
        redis.call('ZADD', KEYS[k + 3], now, id)
        redis.call('HSET', hash_key, 'cs', ended_status(status, CANCELLED, status_limit))
        if job[6] then
          redis.call('ZREM', expiry_index_key, id)
        end
      elseif ARGV[a + 2] == '1' then
        if job[6] then
          redis.call('ZADD', expiry_index_key, job[6], id)
        end
        redis.call('ZREM', in_progress_key, id)
        redis.call('ZADD', pending_key, ARGV[a + 3], id)
        redis.call('HDEL', hash_key, 'cd')
      else
        redis.call('ZADD', in_progress_key, updated, id)
      end
      redis.call('HSET', hash_key, 'ua', updated)
      changed = changed + 1
    end
  end
end
return {changed, evicted}
