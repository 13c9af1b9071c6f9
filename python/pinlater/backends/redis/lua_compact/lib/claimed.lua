-- claimed: what the compact ack and checkpoint scripts share (scripts that say
-- `--@include claimed` get this file pasted in, after records and sets).

-- The jobs a batch names that are IN_PROGRESS: `n` items of `stride` arguments from ARGV[first],
-- each starting with the KEYS index k of its priority's PENDING set (IN_PROGRESS is KEYS[k + 1])
-- and the job's id. One ZMSCORE per IN_PROGRESS set, then one HMGET of the records found.
-- Returns member (member[k][id] is set while the job is in that IN_PROGRESS set) and the
-- records by id (read_records: a missing one is an evicted job).
local function claimed_jobs(records_key, first, stride, n)
  local ids_of, order = {}, {}
  for j = 0, n - 1 do
    local a = first + stride * j
    local k = tonumber(ARGV[a])
    if not ids_of[k] then
      ids_of[k] = {}
      order[#order + 1] = k
    end
    table.insert(ids_of[k], ARGV[a + 1])
  end
  local member, present = {}, {}
  for _, k in ipairs(order) do
    member[k] = scores_of(KEYS[k + 1], ids_of[k])
    for id in pairs(member[k]) do
      present[#present + 1] = id
    end
  end
  return member, read_records(records_key, present)
end
