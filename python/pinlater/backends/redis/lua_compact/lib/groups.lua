-- groups: a compact queue's ordered groups and rules (QueueRules), for the scripts that say
-- `--@include groups` (after records and sets). See keys_compact.py for the keys.
--
-- A group's *active* jobs (at most its concurrency) are where dequeues look: PENDING (in the
-- PENDING set of their priority, or its ready list: an enqueue's common path lists a job due now
-- that joins an empty group), in the held set, or IN_PROGRESS. Its other unfinished jobs *wait*:
--   waiting set  (plc:{S:Q}:p{p}:w, sorted set)  member: id, score: run after (ms), as in PENDING,
--                                                so counts, scans, lookups and deletes read them
--                                                as PENDING; no dequeue, dry run or reserve does;
--   fifo         (plc:{S:Q}:gw, sorted set, all scores 0, in lex order)  member: the group's
--                name with its length in front (8 hex digits), its place (gq, 20 digits), the
--                id, ':' and the priority, for each waiting job but the group's head (below):
--                the next oldest are its first members from the group's prefix (one
--                ZRANGEBYLEX ... LIMIT, whatever the group's size);
--   counts       (plc:{S:Q}:ga, hash)  field: group, value: its active jobs, then ':' and its
--                                      waiting jobs if any ('1', '1:7'), then ':' and its
--                                      head if it has one ('1:7:<head>'): one read and one
--                                      write per group and call;
--   blocked      (plc:{S:Q}:gb, string)  how many groups have waiting jobs (counted up or
--                                      down only when a group starts or stops having any;
--                                      no key when none);
--   buckets      (plc:{S:Q}:gr, hash)  field: group, value: 'tokens:ms' of its groupJobsPerSecond
--                                      bucket at that time;
--   refills      (plc:{S:Q}:gz, sorted set)  member: a forgotten group whose bucket was not full
--                                      yet, score: when it is (ms).
-- A group with no unfinished job has no field in ga nor count in gb (group_counts: HLEN ga
-- less its pin, GET gb; GA_PIN below) and no member in the fifo. Its bucket goes with it if full (a full bucket is as good as none);
-- otherwise it stays (a group that finishes and starts again within a second must not get a
-- fresh bucket) and is due in the refills set, from which any later change of a group's state
-- deletes up to REFILL_SWEEP due buckets of groups still forgotten. So the keys a finished group
-- leaves behind are gone once its bucket would be full again and another group changed (Redis
-- drops an emptied key).
-- A job's group is in its record (gr, with gq: records.lua), so a script that meets a job of no
-- group does nothing here.
--
-- A group's *head* may be kept in its counts instead of the fifo: its oldest waiting job's fifo
-- member less the group's prefix (place, id, ':', priority). The fifo then holds the group's
-- other waiting jobs; without a head (counts written before heads were kept), all of them. A
-- job that joins a group with none waiting becomes its head, one that joins behind others goes
-- to the fifo (an enqueue's place is its id, the newest), but for a job put back by
-- retry_failed_jobs.lua at an older place than the head's: it becomes the head, and the head goes
-- to the fifo (join_group); a move up takes the head first, then the fifo's first members, and
-- the fifo member after those becomes the head (out of the fifo); a deleted head leaves none (the
-- others are all in the fifo). So a group that never holds more than one waiting job (every
-- group of a queue whose groups hold a job or two: the common case) never touches the fifo.
--
-- The rules and keys come at the END of a script's ARGV and KEYS (the "tail"), after its own:
--   ARGV: group concurrency, max in progress (0: none), group jobs per second (0: none), m
--   KEYS: ga, gb, gw, gr, gz, then per priority 1..m: PENDING, waiting and IN_PROGRESS sets
--         (plc:{S:Q}:p{p}:s0, :w, :s1)
-- A script called without them (the rules are the defaults and it needs no group keys) has no
-- tail: rules_tail answers nil.

local FIFO_PLACE_WIDTH = 20
-- Most waiting jobs of one group one call promotes (embedded/groups.py's MAX_PROMOTED), however
-- many of its jobs join or leave in the call (r.promoted counts them): a concurrency raised past
-- a million-job backlog fills its room a thousand at a time, as the promoted jobs finish or jobs
-- join the group, instead of in one script that holds Redis.
local MAX_PROMOTED = 1000
local GROUP_KEYS = 5
local REFILL_SWEEP = 8

-- ga is kept a hash table, never a listpack: Redis keeps a hash of up to hash-max-listpack-entries
-- (512) short fields as a listpack, where every HSET and HDEL of a field scans the whole list, so
-- a queue with a few hundred busy groups paid tens of thousands of instructions per job for its
-- counts. A batch that writes ga also writes the pin: a field that is never a group (group keys
-- are UTF-8; the byte 0xff never is) whose value is longer than hash-max-listpack-value (64 by
-- default), which turns the hash into a table for good. The pin goes with the last group (the key
-- then goes: drop_bare_pin), so a finished group still leaves no key behind; group_counts does not
-- count it (keys_compact.GROUPS_PIN).
local GA_PIN, GA_PIN_VALUE = '\255', string.rep('.', 65)

-- After fields of ga were deleted: the key goes if the pin is all it holds.
local function drop_bare_pin(r)
  if redis.call('HLEN', r.active) == 1 and redis.call('HEXISTS', r.active, GA_PIN) == 1 then
    redis.call('DEL', r.active)
  end
end

-- The tail after `fixed` ARGV values, or nil if there is none.
local function rules_tail(fixed)
  if #ARGV < fixed + 4 then
    return nil
  end
  local m = tonumber(ARGV[fixed + 4])
  local base = #KEYS - (GROUP_KEYS + 3 * m) + 1
  return {
    conc = tonumber(ARGV[fixed + 1]),
    cap = tonumber(ARGV[fixed + 2]),
    rate = tonumber(ARGV[fixed + 3]),
    m = m,
    base = base,
    active = KEYS[base],
    blocked = KEYS[base + 1],
    fifo = KEYS[base + 2],
    buckets = KEYS[base + 3],
    refills = KEYS[base + 4],
    promoted = {},  -- group -> jobs promote moved up in this call (at most MAX_PROMOTED)
  }
end

local function tail_key(r, p, which)
  if p > r.m then
    error({err = string.format('ERR priority %d beyond the %d whose keys were passed', p, r.m)})
  end
  return KEYS[r.base + GROUP_KEYS + 3 * (p - 1) + which]
end

local function pending_of(r, p)
  return tail_key(r, p, 0)
end

local function waiting_of(r, p)
  return tail_key(r, p, 1)
end

-- How many more jobs may go IN_PROGRESS under max_in_progress (math.huge without a cap): the
-- cap less the IN_PROGRESS jobs of every priority (one ZCARD each).
local function room(r)
  if not r or r.cap <= 0 then
    return math.huge
  end
  local n = 0
  for p = 1, r.m do
    n = n + redis.call('ZCARD', tail_key(r, p, 2))
  end
  return math.max(0, r.cap - n)
end

-- Small counts as text, made once per call each (a number's own tostring goes through printf).
local count_texts = {}
local function count_text(n)
  local text = count_texts[n]
  if not text then
    text = string.format('%d', n)
    count_texts[n] = text
  end
  return text
end

-- Counts read as numbers, each text once per call (tonumber goes through strtod).
local count_numbers = {}
local function count_number(text)
  local n = count_numbers[text]
  if not n then
    n = tonumber(text)
    count_numbers[text] = n
  end
  return n
end

-- A group's counts (active, waiting) and head (nil: none) from its ga value (nil: none).
local function parse_counts(value)
  if not value then
    return 0, 0, nil
  end
  if not string.find(value, ':', 1, true) then
    return count_number(value), 0, nil
  end
  local a, w, head = string.match(value, '^(%d+):(%d+):?(.*)$')
  if head == '' then
    head = nil
  end
  return count_number(a), count_number(w), head
end

local function format_counts(active, waiting, head)
  if waiting <= 0 then
    return count_text(active)
  end
  if head then
    return count_text(active) .. ':' .. count_text(waiting) .. ':' .. head
  end
  return count_text(active) .. ':' .. count_text(waiting)
end

local function fifo_prefix(group)
  return string.format('%08x', #group) .. group
end

-- A fifo member less its group's prefix: a head as the counts keep it.
local function fifo_suffix(place, id, p)
  return string.format('%020d%s:%d', place, id, p)
end

-- A fifo member's suffix (fifo_suffix) from the member.
local function member_suffix(member, group)
  return string.sub(member, 8 + #group + 1)
end

-- A fifo suffix's id (text) and priority.
local function suffix_job(suffix)
  local id, p = string.match(suffix, '^(%d+):(%d+)$', FIFO_PLACE_WIDTH + 1)
  return id, tonumber(p)
end

-- A script that changes many groups in one call may batch the work (begin_batch, then
-- flush_groups at its end; enqueue_keyed_jobs.lua and ack_jobs.lua do), so that it costs a few
-- commands per call, not several per job:
-- * counts: each group's are read once (prefetch_groups: one HMGET of ga for all the groups
--   named; a group not prefetched costs its HGET once) and kept in r.batch; at the end one HSET
--   and one HDEL of ga write those that changed, one INCRBY of gb counts the groups that started
--   less those that stopped waiting, with one ZREM and ZADD of the refills, one HDEL of the
--   buckets and one refill sweep;
-- * jobs that go to wait (join_group, and enqueue_keyed_jobs.lua's heads): one ZADD of the fifo
--   and one per waiting set touched;
-- * moving up: a group jobs left (leave_group) is moved up once, at the end, however many of
--   its jobs left (one ZRANGEBYLEX per group; an enqueue's join moves up at once, skipping the
--   fifo members the batch took already); the jobs moved up leave the fifo with one ZREM and go
--   from their waiting sets to PENDING with one ZMSCORE, ZREM and ZADD per priority.
-- The fifo and the waiting sets are read only by the moving up, which writes the batch's waits
-- of its group first, so the end state is the one the unbatched calls leave.
-- A group's state in a batch: an array (cheaper to make than a table of named fields): its
-- counts and head now (A, W, H) and as read (A0, W0, H0), the fifo members the batch took from
-- it (TAKEN), and whether the batch changed its counts, had a job leave it, added a job to its
-- fifo, or revived it (it had no unfinished job).
local A, W, H, A0, W0, H0, TAKEN, CHANGED, LEFT, ADDED, REVIVED = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11

local function begin_batch(r)
  if r then
    r.batch, r.order = {}, {}
    r.fifo_adds, r.waiting_adds, r.fifo_taken = {}, {}, {}
    r.move_groups, r.move_ids, r.move_priorities = {}, {}, {}
  end
end

-- The batch's jobs that went to wait: into the fifo and their waiting sets, one ZADD per key.
local function flush_waiting_adds(r)
  zadd_pairs(r.fifo, r.fifo_adds)
  for p, list in pairs(r.waiting_adds) do
    zadd_skiplist(waiting_of(r, p), #list / 2, zadd_pairs, list)
  end
  r.fifo_adds, r.waiting_adds = {}, {}
  for _, s in pairs(r.batch) do
    s[ADDED] = false
  end
end

-- The batch's promoted jobs (fifo members taken by promote): out of the fifo (one ZREM), and
-- per priority out of the waiting set into the PENDING set with their scores (one ZMSCORE, ZREM
-- and ZADD each). A job no longer in its waiting set (cannot happen: a delete takes it out of
-- the fifo too) is not counted active after all, as the unbatched promote does.
local function flush_moves(r)
  zrem_all(r.fifo, r.fifo_taken)
  local groups, ids, priorities = r.move_groups, r.move_ids, r.move_priorities
  local by_priority, order = {}, {}  -- per priority: the indexes of its moves
  for i = 1, #ids do
    local p = priorities[i]
    local list = by_priority[p]
    if not list then
      list = {}
      by_priority[p] = list
      order[#order + 1] = p
    end
    list[#list + 1] = i
  end
  for _, p in ipairs(order) do
    local list, from = by_priority[p], waiting_of(r, p)
    local listed = {}
    for x, i in ipairs(list) do
      listed[x] = ids[i]
    end
    local scores = scores_of(from, listed)
    local moved, adds = {}, {}
    for x, id in ipairs(listed) do
      local score = scores[id]
      if score then
        moved[#moved + 1] = id
        adds[#adds + 1], adds[#adds + 2] = score, id
      else
        local s = r.batch[groups[list[x]]]
        s[A] = s[A] - 1
      end
    end
    zrem_all(from, moved)
    zadd_pairs(pending_of(r, p), adds)
  end
  r.fifo_taken = {}
  r.move_groups, r.move_ids, r.move_priorities = {}, {}, {}
end

-- A group's counts as read (its ga value, or false or nil for none) into the batch, which has
-- no state for it yet.
local function adopt_counts(r, group, value)
  if value then
    local a, w, head = parse_counts(value)
    r.batch[group] = {a, w, head, a, w, head, 0, false, false, false, false}  -- A .. REVIVED
  else
    r.batch[group] = {0, 0, nil, 0, 0, nil, 0, false, false, false, false}
  end
  local order = r.order
  order[#order + 1] = group
end

-- Read the counts of `groups` (names, repeats allowed) into the batch, one HMGET per hash.
local function prefetch_groups(r, groups)
  if not r or not r.batch then
    return
  end
  local batch, names, n = r.batch, {}, 0
  for i = 1, #groups do
    local group = groups[i]
    if batch[group] == nil then
      batch[group] = false  -- named once (the state follows)
      n = n + 1
      names[n] = group
    end
  end
  for i = 1, n, RECORD_CHUNK do
    local last = math.min(i + RECORD_CHUNK - 1, n)
    local counts = redis.call('HMGET', r.active, unpack(names, i, last))
    for j = i, last do
      adopt_counts(r, names[j], counts[j - i + 1])
    end
  end
end

local function group_state(r, group)
  local batch = r.batch
  if batch then
    local s = batch[group]
    if not s then
      prefetch_groups(r, {group})
      s = batch[group]
    end
    return s[A], s[W], s[H]
  end
  return parse_counts(redis.call('HGET', r.active, group))
end

-- A bucket as (tokens, at ms), refilled to `now`.
local function bucket(r, group, now)
  local full = math.max(1, r.rate)
  local value = redis.call('HGET', r.buckets, group)
  if not value then
    return full, now
  end
  local tokens, at = string.match(value, '^([^:]+):(-?%d+)$')
  tokens, at = tonumber(tokens), tonumber(at)
  if now > at then
    tokens = math.min(full, tokens + (now - at) * r.rate / 1000)
  end
  return tokens, math.max(at, now)
end

-- Delete up to REFILL_SWEEP buckets due in the refills set whose groups are still forgotten.
local function sweep_refills(r, now)
  local due = redis.call('ZRANGEBYSCORE', r.refills, '-inf', now, 'LIMIT', 0, REFILL_SWEEP)
  for _, group in ipairs(due) do
    if redis.call('HEXISTS', r.active, group) == 0 then
      redis.call('HDEL', r.buckets, group)
    end
  end
  if #due > 0 then
    redis.call('ZREM', r.refills, unpack(due))
  end
end

-- A group that is live again (it had no unfinished job): off the refills set, its bucket stays.
local function revive(r, group)
  if r.batch then
    r.batch[group][REVIVED] = true
  else
    redis.call('ZREM', r.refills, group)
  end
end

-- What a group with no unfinished job leaves: nothing if its bucket is full (or there is no rate:
-- whatever it holds), else its bucket, due in the refills set once full. Answers the bucket's
-- due time, or nil if the bucket is to go.
local function forgotten_bucket(r, group, now)
  if r.rate <= 0 then
    return nil
  end
  local tokens, at = bucket(r, group, now)
  local full = math.max(1, r.rate)
  if tokens >= full then  -- (bucket() reads a missing bucket as full)
    return nil
  end
  return at + math.ceil((full - tokens) * 1000 / r.rate)
end

-- Count `delta` more groups with waiting jobs (the key goes at none).
local function count_blocked(r, delta)
  if delta ~= 0 and redis.call('INCRBY', r.blocked, count_text(delta)) <= 0 then
    redis.call('DEL', r.blocked)
  end
end

-- A group's new state; `before`: its waiting jobs as group_state read them.
local function save_state(r, group, active, waiting, head, before, now)
  if waiting <= 0 then
    head = nil
  end
  local batch = r.batch
  if batch then
    local s = batch[group]
    s[A], s[W], s[H], s[CHANGED] = active, waiting, head, true
    r.saved = true
    return
  end
  sweep_refills(r, now)
  if active > 0 or waiting > 0 then
    redis.call('HSET', r.active, group, format_counts(active, waiting, head))
  else
    redis.call('HDEL', r.active, group)
    drop_bare_pin(r)
  end
  if (waiting > 0) ~= (before > 0) then
    count_blocked(r, waiting > 0 and 1 or -1)
  end
  if active == 0 and waiting == 0 then
    -- forgotten; its bucket too if full (without a rate now, whatever it holds), else once full
    local due = forgotten_bucket(r, group, now)
    if due then
      redis.call('ZADD', r.refills, due, group)
    else
      redis.call('HDEL', r.buckets, group)
    end
  end
end

-- Activate the group's oldest waiting jobs while fewer than its concurrency are active: each
-- from its waiting set to its PENDING set, with its score; its head first, then the fifo's first
-- members, read with one member more, which becomes the new head. Returns the new counts and head.
local function promote(r, group, active, waiting, head)
  local done = r.promoted[group] or 0
  if waiting <= 0 or active >= r.conc or done >= MAX_PROMOTED then
    return active, waiting, head
  end
  local suffixes, want = {}, math.min(r.conc - active, MAX_PROMOTED - done)
  if head then
    suffixes[1], head, want = head, nil, want - 1
  end
  local prefix, batch, read = nil, r.batch, 0
  if want > 0 and waiting > #suffixes then
    prefix = fifo_prefix(group)
    local s, taken = nil, 0
    if batch then
      -- The members taken earlier in the batch are still in the fifo: skipped; its jobs that went
      -- to wait in the batch are not yet (written first, should this group have any).
      s = batch[group]
      taken = s[TAKEN]
      if s[ADDED] then
        flush_waiting_adds(r)
      end
    end
    local members = redis.call('ZRANGEBYLEX', r.fifo, '[' .. prefix, '(' .. prefix .. '\255', 'LIMIT',
      count_text(taken), count_text(want + 1))
    read = #members
    for i, member in ipairs(members) do
      if i > want then
        head = member_suffix(member, group)
      else
        suffixes[#suffixes + 1] = member_suffix(member, group)
      end
    end
    if batch then
      s[TAKEN] = taken + read
      for _, member in ipairs(members) do
        r.fifo_taken[#r.fifo_taken + 1] = member
      end
    else
      zrem_all(r.fifo, members)
    end
  end
  for _, suffix in ipairs(suffixes) do
    local id, p = suffix_job(suffix)
    if batch then
      tail_key(r, p, 1)  -- a priority beyond the keys passed fails here, as unbatched
      local n = #r.move_ids + 1
      r.move_groups[n], r.move_ids[n], r.move_priorities[n] = group, id, p
      active = active + 1
    else
      local from = waiting_of(r, p)
      local score = redis.call('ZSCORE', from, id)
      if score then
        redis.call('ZREM', from, id)
        redis.call('ZADD', pending_of(r, p), score, id)
        active = active + 1
      end
    end
    waiting = waiting - 1
  end
  if #suffixes == 0 then
    waiting = 0  -- the count ran ahead of the fifo (cannot happen): trust the fifo
  end
  r.promoted[group] = done + #suffixes
  return active, waiting, head
end

-- An active job of `group` left it (finished for good, or deleted): the next ones move up.
-- In a batch the group is moved up once, at flush_groups, however many of its jobs left.
local function leave_group(r, group, now)
  local s = r.batch and r.batch[group]
  if s then  -- group_state and save_state, inlined
    s[A], s[CHANGED], s[LEFT] = math.max(0, s[A] - 1), true, true
    r.saved = true
    return
  end
  local active, waiting, head = group_state(r, group)
  local before = waiting
  if r.batch then
    save_state(r, group, math.max(0, active - 1), waiting, head, before, now)
    r.batch[group][LEFT] = true
    return
  end
  active, waiting, head = promote(r, group, math.max(0, active - 1), waiting, head)
  save_state(r, group, active, waiting, head, before, now)
end

-- A waiting job of `group` (its record `job`, priority p) is deleted: out of the fifo and the
-- group's count (the caller removes it from its waiting set). A head deleted leaves none: the
-- others are all in the fifo.
local function drop_waiting(r, group, job, id, p, now)
  local suffix = fifo_suffix(job.gq, id, p)
  local active, waiting, head = group_state(r, group)
  if head == suffix then
    head = nil
  else
    redis.call('ZREM', r.fifo, fifo_prefix(group) .. suffix)
  end
  save_state(r, group, active, math.max(0, waiting - 1), head, waiting, now)
end

-- Job `id` (record `job`, priority p, PENDING scored `score` ms) joins `group` at place
-- job.gq, as an enqueue puts it: active at once if the group has room and nothing waits (true:
-- the caller puts it in its PENDING set), else waiting (in its waiting set and the fifo here).
-- The group's oldest waiting jobs are activated first while there is room. A place older than
-- the head's (a job put back by retry_failed_jobs.lua, at its old place) makes it the head, and
-- the head goes to the fifo; any other place goes to the fifo, which keeps places in order.
local function join_group(r, group, job, id, p, score, now)
  local batch = r.batch
  local s = batch and batch[group]
  if s and s[W] == 0 and s[A] < r.conc then
    -- a batch's most common join, in place: active at once (promote and save_state, inlined)
    if s[A] == 0 then
      s[REVIVED] = true
    end
    s[A], s[CHANGED] = s[A] + 1, true
    r.saved = true
    return true
  end
  local active, waiting, head = group_state(r, group)
  local before = waiting
  if active == 0 and waiting == 0 then
    revive(r, group)
  end
  active, waiting, head = promote(r, group, active, waiting, head)
  local now_active = active < r.conc and waiting == 0
  if now_active then
    active = active + 1
  else
    local suffix = fifo_suffix(job.gq, id, p)
    local member
    if waiting == 0 then
      head = suffix  -- the head of a group with none waiting, in its counts only
    elseif head and suffix < head then  -- places are fixed-width digits: text order is theirs
      member, head = fifo_prefix(group) .. head, suffix
    else
      member = fifo_prefix(group) .. suffix  -- an enqueue's: behind the others, the newest place
    end
    waiting = waiting + 1
    if r.batch then
      waiting_of(r, p)  -- a priority beyond the keys passed fails here, as unbatched
      if member then
        local fifo_adds = r.fifo_adds
        fifo_adds[#fifo_adds + 1], fifo_adds[#fifo_adds + 2] = 0, member
        r.batch[group][ADDED] = true
      end
      local adds = r.waiting_adds[p]
      if not adds then
        adds = {}
        r.waiting_adds[p] = adds
      end
      adds[#adds + 1], adds[#adds + 2] = score, id
    else
      if member then
        redis.call('ZADD', r.fifo, 0, member)
      end
      redis.call('ZADD', waiting_of(r, p), score, id)
    end
  end
  save_state(r, group, active, waiting, head, before, now)
  return now_active
end

-- Take a token from the group's bucket at `now` (ms): true, or false and when the next token
-- is due (ms).
local function take_token(r, group, now)
  local tokens, at = bucket(r, group, now)
  if tokens >= 1 then
    redis.call('HSET', r.buckets, group, string.format('%.17g:%d', tokens - 1, at))
    return true
  end
  return false, at + math.ceil((1 - tokens) * 1000 / r.rate)
end

-- The most jobs one dequeue or reservation reschedules to their groups' next tokens.
local MAX_RATE_SKIPS = 1000

-- The groupJobsPerSecond gate of one dequeue or reservation call (`metered`: the queue has a
-- group rate and the call is not a dry run). `waits(id, job)`: whether the PENDING job must wait
-- for its group's next token, which then reschedules it in `pending_key` to when that is due;
-- `spent()`: whether the call rescheduled MAX_RATE_SKIPS jobs and should stop looking.
local function token_gate(r, pending_key, now, metered)
  local skips = 0
  local function waits(id, job)
    if not metered or not job.gr then
      return false
    end
    local ok, due = take_token(r, job.gr, now)
    if ok then
      return false
    end
    redis.call('ZADD', pending_key, due, id)
    skips = skips + 1
    return true
  end
  local function spent()
    return skips >= MAX_RATE_SKIPS
  end
  return waits, spent
end

-- Write the batch's changed counts (begin_batch), then sweep the refills once if any changed;
-- the batch ends.
local function flush_groups(r, now)
  if not r or not r.batch then
    return
  end
  local conc = r.conc
  for _, group in ipairs(r.order) do  -- the groups jobs left (leave_group), in order
    local s = r.batch[group]
    if s[LEFT] and s[W] > 0 and s[A] < conc then  -- (promote would change nothing otherwise)
      s[A], s[W], s[H] = promote(r, group, s[A], s[W], s[H])
    end
  end
  flush_waiting_adds(r)
  flush_moves(r)
  local batch, order = r.batch, r.order
  r.batch, r.order = nil, nil
  local set_active, del_active, blocked, sets, dels = {}, {}, 0, 0, 0
  local unrefill, refill, drop_buckets = {}, {}, {}
  local rated = r.rate > 0
  for _, group in ipairs(order) do
    local s = batch[group]
    if s[CHANGED] then
      local a, w = s[A], s[W]
      if a ~= s[A0] or w ~= s[W0] or s[H] ~= s[H0] then
        if a > 0 or w > 0 then
          set_active[sets + 1], set_active[sets + 2] = group, format_counts(a, w, s[H])
          sets = sets + 2
        else
          dels = dels + 1
          del_active[dels] = group
        end
      end
      if (w > 0) ~= (s[W0] > 0) then  -- blocked only changes when it starts or stops waiting
        blocked = blocked + (w > 0 and 1 or -1)
      end
      if a == 0 and w == 0 then
        local due = rated and forgotten_bucket(r, group, now)  -- (nil without a rate)
        if due then
          refill[#refill + 1], refill[#refill + 2] = due, group
        else
          drop_buckets[#drop_buckets + 1] = group
          if s[REVIVED] then
            unrefill[#unrefill + 1] = group
          end
        end
      elseif s[REVIVED] then
        unrefill[#unrefill + 1] = group
      end
    elseif s[REVIVED] then
      unrefill[#unrefill + 1] = group
    end
  end
  if sets > 0 then
    set_active[sets + 1], set_active[sets + 2] = GA_PIN, GA_PIN_VALUE
  end
  for i = 1, #set_active, 2 * RECORD_CHUNK do
    redis.call('HSET', r.active, unpack(set_active, i, math.min(i + 2 * RECORD_CHUNK - 1, #set_active)))
  end
  count_blocked(r, blocked)
  for i = 1, #del_active, RECORD_CHUNK do
    redis.call('HDEL', r.active, unpack(del_active, i, math.min(i + RECORD_CHUNK - 1, #del_active)))
  end
  if dels > 0 then
    drop_bare_pin(r)
  end
  -- Most queues have no buckets nor refills (no groupJobsPerSecond): one EXISTS each, not a
  -- command naming every group that was forgotten or revived.
  if #drop_buckets > 0 and redis.call('EXISTS', r.buckets) == 1 then
    for i = 1, #drop_buckets, RECORD_CHUNK do
      redis.call('HDEL', r.buckets, unpack(drop_buckets, i, math.min(i + RECORD_CHUNK - 1, #drop_buckets)))
    end
  end
  if #unrefill > 0 and redis.call('EXISTS', r.refills) == 1 then
    zrem_all(r.refills, unrefill)
  end
  zadd_pairs(r.refills, refill)
  if r.saved then  -- as unbatched: a sweep with each change of a group's state, none without
    sweep_refills(r, now)
  end
  r.saved = nil
end

-- Each group of `joined` had no unfinished job, and one job of the call joined it, which is
-- active at once: its counts are '1', it is off the refills set, and the refills are swept, as
-- flush_groups writes a revived group (an enqueue's common path: no batch state).
local function join_simple(r, joined, now)
  if #joined == 0 then
    return
  end
  local fields = {}
  for i = 1, #joined do
    fields[2 * i - 1], fields[2 * i] = joined[i], '1'
  end
  fields[#fields + 1], fields[#fields + 2] = GA_PIN, GA_PIN_VALUE
  for i = 1, #fields, 2 * RECORD_CHUNK do
    redis.call('HSET', r.active, unpack(fields, i, math.min(i + 2 * RECORD_CHUNK - 1, #fields)))
  end
  if redis.call('EXISTS', r.refills) == 1 then
    zrem_all(r.refills, joined)
  end
  sweep_refills(r, now)
end

-- The groups of `left` (one entry per job that left its group, in order: a group once per job)
-- each lose an active job: their counts read at once, written at the end (as ack_jobs.lua and
-- checkpoint_jobs.lua need after their own writes). Without groupJobsPerSecond (a bucket would
-- need reading), two common cases of a group that a job of the call left once go without batch
-- state, as flush_groups would leave them:
-- * one active job and none waiting ('1' in ga): the group is forgotten (its field, its bucket,
--   a refill sweep);
-- * a active jobs, a within the concurrency, and one waiting, its head ('a:1:<head>', no fifo
--   member): the head moves up (from its waiting set to PENDING with its score, one ZMSCORE,
--   ZREM and ZADD per priority, per 1,000 such groups), the counts become 'a', and the group stops
--   being blocked. This is every group of a load whose groups hold a job active and the next
--   one waiting (instructions_per_job.py --lead 1000), where the batch's general promote cost
--   about 20k Redis instructions per job more.
-- The others go through the batch, their counts adopted from the same read of ga.
local function leave_groups(r, left, now)
  begin_batch(r)
  local gone = {}  -- group -> true: forgotten in place
  if r.rate > 0 then
    prefetch_groups(r, left)
  else
    local times, names = {}, {}
    for i = 1, #left do
      local group = left[i]
      local seen = times[group]
      if seen then
        times[group] = seen + 1
      else
        times[group] = 1
        names[#names + 1] = group
      end
    end
    local forget, handled = {}, 0
    -- the groups whose head moves up: per priority (in order of first use) their heads' ids,
    -- and their groups and active counts, in the same order
    local head_ids, head_groups, head_actives, head_order = {}, {}, {}, {}
    local head_only = '^(%d+):1:' .. string.rep('%d', FIFO_PLACE_WIDTH) .. '(%d+):(%d+)$'
    for i = 1, #names, RECORD_CHUNK do
      local last = math.min(i + RECORD_CHUNK - 1, #names)
      local counts = redis.call('HMGET', r.active, unpack(names, i, last))
      for k = i, last do
        local group, value = names[k], counts[k - i + 1]
        if value == '1' and times[group] == 1 then
          forget[#forget + 1] = group
          gone[group] = true
          handled = handled + 1
        else
          local a, id, p
          if value and times[group] == 1 then
            a, id, p = string.match(value, head_only)
          end
          if a then
            a, p = count_number(a), count_number(p)
          end
          if a and a >= 1 and a <= r.conc and p <= r.m and (r.promoted[group] or 0) < MAX_PROMOTED then
            local ids = head_ids[p]
            if not ids then
              ids = {}
              head_ids[p], head_groups[p], head_actives[p] = ids, {}, {}
              head_order[#head_order + 1] = p
            end
            local x = #ids + 1
            ids[x], head_groups[p][x], head_actives[p][x] = id, group, a
            gone[group] = true
            handled = handled + 1
          else
            adopt_counts(r, group, value)
          end
        end
      end
    end
    if #head_order > 0 then
      local fields, moved_up = {}, 0
      for _, p in ipairs(head_order) do
        local ids, groups, actives, from = head_ids[p], head_groups[p], head_actives[p], waiting_of(r, p)
        local scores = scores_of(from, ids)
        local moved, adds = {}, {}
        for x, id in ipairs(ids) do
          local group, score = groups[x], scores[id]
          r.promoted[group] = (r.promoted[group] or 0) + 1
          if score then
            moved[#moved + 1] = id
            adds[#adds + 1], adds[#adds + 2] = score, id
            fields[#fields + 1], fields[#fields + 2] = group, count_text(actives[x])
          elseif actives[x] > 1 then  -- out of its waiting set (cannot happen): not active
            fields[#fields + 1], fields[#fields + 2] = group, count_text(actives[x] - 1)
          else  -- nothing left of the group
            forget[#forget + 1] = group
          end
          moved_up = moved_up + 1
        end
        zrem_all(from, moved)
        zadd_pairs(pending_of(r, p), adds)
      end
      if #fields > 0 then
        fields[#fields + 1], fields[#fields + 2] = GA_PIN, GA_PIN_VALUE
      end
      for i = 1, #fields, 2 * RECORD_CHUNK do
        redis.call('HSET', r.active, unpack(fields, i, math.min(i + 2 * RECORD_CHUNK - 1, #fields)))
      end
      count_blocked(r, -moved_up)
      if #forget == 0 and handled == #left then  -- (else the forgetting or flush_groups sweeps)
        sweep_refills(r, now)
      end
    end
    if #forget > 0 then
      for i = 1, #forget, RECORD_CHUNK do
        redis.call('HDEL', r.active, unpack(forget, i, math.min(i + RECORD_CHUNK - 1, #forget)))
      end
      drop_bare_pin(r)
      if redis.call('EXISTS', r.buckets) == 1 then
        for i = 1, #forget, RECORD_CHUNK do
          redis.call('HDEL', r.buckets, unpack(forget, i, math.min(i + RECORD_CHUNK - 1, #forget)))
        end
      end
      sweep_refills(r, now)
    end
    if handled == #left then
      r.batch, r.order = nil, nil  -- nothing left for the batch
      return
    end
  end
  for _, group in ipairs(left) do
    if not gone[group] then
      leave_group(r, group, now)
    end
  end
  flush_groups(r, now)
end
