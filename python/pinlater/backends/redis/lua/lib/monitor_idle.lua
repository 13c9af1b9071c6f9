-- monitor_idle: the body of monitor_idle.lua, the same in both layouts.
local per_queue = tonumber(ARGV[1])
local found = {}
for i = 1, #KEYS, per_queue do
  found[#found + 1] = redis.call('EXISTS', unpack(KEYS, i, i + per_queue - 1))
end
return found
