-- expired_counts: the body of expired_counts.lua, the same in both layouts.
local counts = {}
for i = 1, #KEYS do
  counts[i] = redis.call('GET', KEYS[i]) or 0
end
return counts
