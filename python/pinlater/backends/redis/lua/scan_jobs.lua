--[[ scan_jobs: read up to ARGV[6] jobs of one set within a score range, from an offset.

Also the candidate reader for body-regex filters, which cannot run in Lua (it has no regular
expressions): the store pages through with bodies and matches in Python. A member whose hash is
gone (evicted) is removed from the set, counted, and skipped; `looked` tells the caller how far
the offset moved.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  the sorted set to read (plq_{shard}_{queue}.p{p}_s{s})
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  lowest score (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  offset (in members of the range, after earlier evictions were removed)
ARGV[6]  count
ARGV[7]  '1' to include bodies, else '0'
ARGV[8]  '1' for highest score first, else '0'

Hash fields: bd al ar cs ca ua cd (keys.JobField).
Returns {evicted, looked, then 9 values per job: id, score, al, ar, cs, ca, ua, cd (nil if none),
bd (nil unless asked)}, or -1 if the queue does not exist.
]]
local names_key, set_key = KEYS[1], KEYS[2]
local queue, hash_prefix, low, high = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local offset, count, with_body, newest_first = ARGV[5], ARGV[6], ARGV[7] == '1', ARGV[8] == '1'
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local page
if newest_first then
  page = redis.call('ZREVRANGEBYSCORE', set_key, high, low, 'WITHSCORES', 'LIMIT', offset, count)
else
  page = redis.call('ZRANGEBYSCORE', set_key, low, high, 'WITHSCORES', 'LIMIT', offset, count)
end
local out = {0, #page / 2}
local evicted = 0
for i = 1, #page, 2 do
  local id, score = page[i], page[i + 1]
  local hash_key = hash_prefix .. id
  local job = redis.call('HMGET', hash_key, 'bd', 'al', 'ar', 'cs', 'ca', 'ua', 'cd')
  if not job[1] or not job[2] then
    redis.call('ZREM', set_key, id)
    redis.call('DEL', hash_key)
    evicted = evicted + 1
  else
    local body = false
    if with_body then
      body = job[1]
    end
    local row = {id, score, job[2], job[3], job[4], job[5], job[6], job[7], body}
    for v = 1, 9 do
      out[#out + 1] = row[v]
    end
  end
end
out[1] = evicted
return out
