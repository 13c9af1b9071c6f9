--[[ grouped_records: whether a page of a compact queue's records holds a job of an ordered group
(migrate.py refuses to move such a queue to the original layout, whose keys have no place for a
group). A record of a group packs nine items (lua_compact/lib/records.lua: gr and gq after the
seven of every job), so its msgpack array header is 0x99, a job without a group's 0x97: the
first byte answers, without unpacking the record. A record with an expiry (0x9a) or a dedup key
(0x9b) has items eight and nine whether or not it has a group (false when it has none): its
eighth item, gr, answers.

KEYS[1]  the queue's records hash (plc:{S:Q}:j)
ARGV[1]  HSCAN cursor
ARGV[2]  HSCAN COUNT

Returns {next cursor ('0': done), 1 if a record of the page is a grouped job's else 0}.
]]
local GROUPED_HEADER, WITH_EXPIRY, WITH_KEY = 0x99, 0x9a, 0x9b

local function grouped(record)
  local header = string.byte(record, 1)
  if header == GROUPED_HEADER then
    return true
  elseif header == WITH_EXPIRY or header == WITH_KEY then
    local gr = select(9, cmsgpack.unpack_limit(record, 8, 1))  -- the offset, then items 1 to 8
    return type(gr) == 'string'
  end
  return false
end

local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local fields = page[2]
for i = 2, #fields, 2 do
  if grouped(fields[i]) then
    return {page[1], 1}
  end
end
return {page[1], 0}
