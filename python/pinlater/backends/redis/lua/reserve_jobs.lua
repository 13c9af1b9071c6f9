--[[ reserve_jobs: reserve up to ARGV[4] eligible PENDING jobs of one priority for the dequeue
broker, leaving them PENDING (same set, same score: counts and scans are unchanged).

A reservation is an entry in the priority's reserved sorted set (member: id, score: expiry) plus
cd = the reservation in the job hash. It is live while its expiry is after now; lapsed entries
are removed here first, so every member left is live. Eligible: score (run after) <= now and not
reserved, lowest score first (equal scores in Redis' text order of ids). A member whose hash is
gone (evicted) is removed from the PENDING set, its remains deleted, and counted.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  PENDING sorted set (plq_{shard}_{queue}.p{p}_s0)
KEYS[3]  reserved sorted set (plq_{shard}_{queue}.p{p}_r)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  now, seconds as float
ARGV[4]  limit
ARGV[5]  reservation (stored as cd)
ARGV[6]  expiry, seconds as float

Hash fields: bd al ar ca ua cd (keys.JobField).
Returns {evicted, then 7 values per job: id, run after score, bd, al, ar, ca, ua}, or -1 if the
queue does not exist. The caller orders the jobs by (score, id).
]]
local names_key, pending_key, reserved_key = KEYS[1], KEYS[2], KEYS[3]
local queue, hash_prefix, now = ARGV[1], ARGV[2], ARGV[3]
local limit, reservation, expiry = tonumber(ARGV[4]), ARGV[5], ARGV[6]
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
redis.call('ZREMRANGEBYSCORE', reserved_key, '-inf', now)
local out, reserved = {0}, {}
local found, evicted, offset = 0, 0, 0
while found < limit do
  local page_size = limit - found + redis.call('ZCARD', reserved_key)
  local page = redis.call('ZRANGEBYSCORE', pending_key, '-inf', now, 'WITHSCORES', 'LIMIT', offset, page_size)
  for i = 1, #page, 2 do
    if found >= limit then
      break
    end
    local id, score = page[i], page[i + 1]
    if redis.call('ZSCORE', reserved_key, id) then
      offset = offset + 1
    else
      local hash_key = hash_prefix .. id
      local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'ca', 'ua')
      if not job[1] or not job[2] then
        redis.call('ZREM', pending_key, id)
        redis.call('DEL', hash_key)
        evicted = evicted + 1
      else
        redis.call('HSET', hash_key, 'cd', reservation)
        reserved[#reserved + 1] = expiry
        reserved[#reserved + 1] = id
        offset = offset + 1
        out[#out + 1] = id
        out[#out + 1] = score
        out[#out + 1] = job[1]
        out[#out + 1] = job[2]
        out[#out + 1] = job[3]
        out[#out + 1] = job[4]
        out[#out + 1] = job[5]
        found = found + 1
      end
    end
  end
  -- One variadic ZADD per page: the page's later members are not reserved, so the next page
  -- (read after this) sees every reservation made here.
  for i = 1, #reserved, 2000 do
    redis.call('ZADD', reserved_key, unpack(reserved, i, math.min(i + 1999, #reserved)))
  end
  reserved = {}
  if #page < 2 * page_size then
    break
  end
end
out[1] = evicted
return out
