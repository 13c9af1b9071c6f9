--[[ delete_jobs: delete up to ARGV[5] jobs of one set within a score range (lowest first), or
exactly the listed ids that are still in the set (the store's body-regex path picks them); for
PENDING, the jobs the dequeue broker holds (lib/holds.lua) too, which are PENDING as well.

KEYS[1]  queue names sorted set (pln_{shard})
KEYS[2]  the sorted set to delete from (plq_{shard}_{queue}.p{p}_s{s})
KEYS[3]  optional, with KEYS[4] and KEYS[5]: the held set, hold expiry set and holders hash
         (plq_{shard}_{queue}.p{p}_h, _x, _o)
ARGV[1]  queue name
ARGV[2]  job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]  lowest score (ZRANGEBYSCORE syntax: '-inf', '(x' or 'x')
ARGV[4]  highest score (same syntax)
ARGV[5]  limit
ARGV[6..] local ids to delete instead of a range (optional)

Returns how many jobs were deleted, or -1 if the queue does not exist.
]]
--@include holds
local names_key, set_key = KEYS[1], KEYS[2]
local held_key, expiry_key, holders_key = KEYS[3], KEYS[4], KEYS[5]
local queue, hash_prefix, low, high, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end

-- Delete one job from the set or, failing that, from the held set; whether it was in either.
local function delete(id)
  if redis.call('ZREM', set_key, id) == 0 then
    if not held_key or redis.call('ZREM', held_key, id) == 0 then
      return false
    end
    drop_holds(held_key, expiry_key, holders_key, {id})
  end
  redis.call('DEL', hash_prefix .. id)
  return true
end

local deleted = 0
if #ARGV > 5 then
  for i = 6, #ARGV do
    if deleted >= limit then
      break
    end
    if delete(ARGV[i]) then
      deleted = deleted + 1
    end
  end
  return deleted
end
if limit <= 0 then
  return 0
end
local ids = redis.call('ZRANGEBYSCORE', set_key, low, high, 'WITHSCORES', 'LIMIT', 0, limit)
if held_key then
  local held = redis.call('ZRANGEBYSCORE', held_key, low, high, 'WITHSCORES', 'LIMIT', 0, limit)
  if #held > 0 then  -- lowest scores of the two together (ties by id as text, as Redis orders)
    local both = {}
    for _, page in ipairs({ids, held}) do
      for i = 1, #page, 2 do
        both[#both + 1] = {page[i], tonumber(page[i + 1])}
      end
    end
    table.sort(both, function(x, y)
      if x[2] ~= y[2] then
        return x[2] < y[2]
      end
      return x[1] < y[1]
    end)
    ids = {}
    for i = 1, math.min(limit, #both) do
      ids[#ids + 1] = both[i][1]
      ids[#ids + 1] = both[i][2]
    end
  end
end
for i = 1, #ids, 2 do
  if delete(ids[i]) then
    deleted = deleted + 1
  end
end
return deleted
