-- claimed: what the compact ack and checkpoint scripts share (scripts that say
-- `--@include claimed` get this file pasted in, after records and sets).

-- Which of `ids` the IN_PROGRESS set `key` holds: true if all of them, else a table id -> score
-- for those it holds (scores_of). Not by ZMSCORE alone: Redis 7.0 formats each score it answers
-- with snprintf('%.17g'), about 3,800 instructions a claim time, a fifth of a plain ack. A ZADD
-- NX of the ids at -inf (per chunk) adds only those the set lacks and answers how many: 0 for
-- the usual batch, and then nothing was written (Redis propagates no command that changed
-- nothing). Otherwise the ids it added, the set's only members at -inf (claim times are the
-- servers' clocks), go again at once and ZMSCORE decides; so it does after an error (a wrong
-- type; a Redis out of memory refuses a ZADD before the script's first write, but not a ZMSCORE
-- or a ZREM). Such a batch (an ack resent, say) writes that ZADD and ZREM, which change nothing,
-- to the AOF and replicas, and they signal the key (WATCH, keyspace events, client caching) as
-- changed; a ZMSCORE alone did not. Nothing of ours watches those sets.
local function in_progress_of(key, ids)
  for i = 1, #ids, SET_CHUNK do
    local at_floor = {}
    for j = i, math.min(i + SET_CHUNK - 1, #ids) do
      at_floor[#at_floor + 1], at_floor[#at_floor + 2] = '-inf', ids[j]
    end
    local added = redis.pcall('ZADD', key, 'NX', unpack(at_floor))
    if added ~= 0 then  -- (an error: this chunk added nothing, nor did those before it)
      if type(added) == 'number' then
        zrem_all(key, redis.call('ZRANGEBYSCORE', key, '-inf', '-inf'))
      end
      return scores_of(key, ids)  -- for every chunk: no need to ask the rest
    end
  end
  return true
end

-- The jobs a batch names that are IN_PROGRESS: `n` items of `stride` arguments from ARGV[first],
-- each starting with the KEYS index k of its priority's PENDING set (IN_PROGRESS is KEYS[k + 1])
-- and the job's id. One in_progress_of per IN_PROGRESS set, then one HMGET of the records found.
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
    local found = in_progress_of(KEYS[k + 1], ids_of[k])
    if found == true then
      found = {}
      for _, id in ipairs(ids_of[k]) do
        found[id] = true
      end
    end
    member[k] = found
    for id in pairs(found) do
      present[#present + 1] = id
    end
  end
  return member, read_records(records_key, present)
end
