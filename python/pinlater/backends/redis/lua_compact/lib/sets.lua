-- sets: batched sorted-set commands of the compact scripts (scripts that say `--@include sets`
-- get this file pasted in; holds.lua needs it pasted before itself).
--
-- Every helper makes one variadic command per chunk of SET_CHUNK members, never one per member,
-- and stays far below Lua's unpack limit (8000). Scores are integer milliseconds.

local SET_CHUNK = 1000

local function zrem_all(key, members)
  for i = 1, #members, SET_CHUNK do
    redis.call('ZREM', key, unpack(members, i, math.min(i + SET_CHUNK - 1, #members)))
  end
end

-- A score as a ZADD argument: Redis formats a Lua number argument with printf's %.17g, which
-- costs more than the ZADD's own work on the member; scores repeat within a batch, so each
-- distinct one is formatted once, here ('%.17g' prints an integer below 1e17 as its digits).
local score_args = {}
local function score_arg(score)
  if type(score) ~= 'number' then
    return score
  end
  local text = score_args[score]
  if not text then
    text = string.format('%.17g', score)
    score_args[score] = text
  end
  return text
end

-- ZADDs go last member first. A batch mostly comes in ascending (score, id) order, and a small
-- sorted set (a listpack, up to zset-max-listpack-entries) inserts by scanning from its lowest
-- member, parsing each score: in descending order each insert stops at the first member, which
-- makes a ZADD of 100 new members into a small set about 2.7 times cheaper.

-- `pairs` is flat: score, member, score, member, ...
local function zadd_pairs(key, pairs)
  for last = #pairs, 1, -2 * SET_CHUNK do
    local args, n = {}, 0
    for i = last, math.max(1, last - 2 * SET_CHUNK + 1), -2 do
      args[n + 1], args[n + 2] = score_arg(pairs[i - 1]), pairs[i]
      n = n + 2
    end
    redis.call('ZADD', key, unpack(args))
  end
end

-- Every member scored by the same score.
local function zadd_all(key, score, members)
  score = score_arg(score)
  for last = #members, 1, -SET_CHUNK do
    local args, n = {}, 0
    for m = last, math.max(1, last - SET_CHUNK + 1), -1 do
      args[n + 1], args[n + 2] = score, members[m]
      n = n + 2
    end
    redis.call('ZADD', key, unpack(args))
  end
end

-- A set of jobs in progress is a skiplist from its first claim of several jobs, never a listpack:
-- Redis keeps a sorted set of up to zset-max-listpack-entries (128) short members as a listpack,
-- where each ZMSCORE and ZREM of a member scans the list and parses its scores, so a queue with
-- fewer than 128 jobs in progress paid about a quarter of Redis' instructions per job at its
-- acks. Such a claim into a set that is not a skiplist yet (none, or a listpack: OBJECT
-- ENCODING) adds a member longer than zset-max-listpack-value (64 by default), which makes it
-- one, with its jobs, and removes it in the same call: Redis never turns a skiplist back into a
-- listpack while the key lives, and no reader ever sees that member. A claim of fewer than
-- SKIPLIST_FROM jobs leaves the set as it is (a handful of members costs little to scan, and the
-- two extra commands would cost more); one of more than LISTPACK_ENTRIES converts it by itself.
-- The same holds for a group's waiting set (lib/groups.lua: its jobs are read with ZMSCORE and
-- moved out with ZREM as they move up): lib/groups.lua adds to it with zadd_skiplist(key, n,
-- zadd_pairs, pairs). (One local for both: a script's main function may have 200 at most.)
local SKIPLIST_PIN, SKIPLIST_FROM, LISTPACK_ENTRIES = string.rep('\255', 65), 8, 128

-- add(key, a, b), a write of n members to the sorted set `key`, the set made a skiplist first
-- where above says. The pin goes even if the write fails (a score that is not a number), and the
-- script then fails with the write's error: no reader ever sees it.
local function zadd_skiplist(key, n, add, a, b)
  local pin = n >= SKIPLIST_FROM and n <= LISTPACK_ENTRIES and redis.call('OBJECT', 'ENCODING', key) ~= 'skiplist'
  if not pin then
    add(key, a, b)
    return
  end
  redis.call('ZADD', key, 0, SKIPLIST_PIN)
  local ok, err = pcall(add, key, a, b)
  redis.call('ZREM', key, SKIPLIST_PIN)
  if not ok then
    error(err, 0)
  end
end

-- The scores of `members` in a sorted set, as a table member -> score (the score's text, as
-- Redis gives it), with no entry for a member the set does not hold. One ZMSCORE per chunk; a
-- Redis before 6.2 has no ZMSCORE, and gets a ZSCORE per member instead, as the original does.
local function scores_of(key, members)
  local scores = {}
  for i = 1, #members, SET_CHUNK do
    local last = math.min(i + SET_CHUNK - 1, #members)
    local got = redis.pcall('ZMSCORE', key, unpack(members, i, last))
    if got.err then
      got = {}
      for j = i, last do
        got[j - i + 1] = redis.call('ZSCORE', key, members[j])
      end
    end
    for j = i, last do
      if got[j - i + 1] then
        scores[members[j]] = got[j - i + 1]
      end
    end
  end
  return scores
end

-- A per-key batch of writes: add(k, score, member) / remove(k, member) collect what one script
-- changes in the sets KEYS[k], and flush() sends one ZREM and one ZADD per set touched. Nothing
-- is read back in between, so a script that needs the changed state keeps it itself.
local function set_writes()
  local adds, removes, order = {}, {}, {}
  local function touch(k)
    if not adds[k] then
      adds[k], removes[k] = {}, {}
      order[#order + 1] = k
    end
  end
  local writes = {}
  function writes.add(k, score, member)
    touch(k)
    local a = adds[k]
    local n = #a
    a[n + 1], a[n + 2] = score, member
  end
  function writes.remove(k, member)
    touch(k)
    local r = removes[k]
    r[#r + 1] = member
  end
  function writes.flush()
    for _, k in ipairs(order) do
      zrem_all(KEYS[k], removes[k])
      zadd_pairs(KEYS[k], adds[k])
    end
    adds, removes, order = {}, {}, {}
  end
  return writes
end
