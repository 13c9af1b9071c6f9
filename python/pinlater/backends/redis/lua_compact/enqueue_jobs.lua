--[[ enqueue_jobs: insert a batch of PENDING jobs (any mix of priorities) in one call.

As lua/enqueue_jobs.lua, in the compact layout (lib/insert.lua, shared with
enqueue_keyed_jobs.lua): ids come from the field `id` of the queue's meta
hash (one HINCRBY for the batch), so they are consecutive and in the order of the jobs; the
records of the whole batch go in with one HSET (per chunk of 1000), each PENDING set gets one
ZADD, scored by run after in ms. With READY_LISTS (on unless scripts.py turns it off), a job
whose run after is the enqueue's now goes to the ready list of its priority instead (one RPUSH
per list, lib/ready.lua), unless the list's last score is after now (another server's clock
ahead) or its id would break the text order of the list's run of that ms (it gained a digit):
then to the PENDING set, as the others.

KEYS[1]     the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]     the id counter: the same meta hash (field `id`)
KEYS[3..m+2]     PENDING sorted sets of the m priorities in the batch (plc:{S:Q}:p{p}:s0)
KEYS[m+3..2m+2]  their ready lists, in the same order (plc:{S:Q}:p{p}:r): KEYS[k + m] is the
                 list of the priority whose PENDING set is KEYS[k]
ARGV[1]     queue name
ARGV[2]     the records hash (plc:{S:Q}:j)
ARGV[3]     now, seconds as float (ca and ua)
ARGV[4]     number of jobs, n; or 'u' then n: a uniform call (below)
then 5 per job, in order:
  ARGV[i]   index into KEYS of the job's PENDING set
  ARGV[i+1] body (bd)
  ARGV[i+2] attempts allowed (al, and ar)
  ARGV[i+3] run after, seconds as float (the score)
  ARGV[i+4] custom status, already truncated (cs)

A uniform call (ARGV[4] 'u' then n, 1 <= n <= RECORD_CHUNK): jobs that share all but their body
(the usual batch; the server sends one where the jobs allow it): ARGV[5] to ARGV[8] are the KEYS
index, attempts, run after and status they share, then one argument a job, its body. Each
argument costs Redis hundreds of instructions (its object, then its Lua string), so such a batch
sends one a job, not five. Where its ids would gain a digit with ready lists on, it is expanded
to five values a job for the general loop (at the end of this script), with the ids it took.

Returns the local ids in job order, or -1 if the queue does not exist.
]]
-- What every function below reads as ARGV: the call's own, or a uniform call's expansion
-- (below).
local ARGV = ARGV
--@include records
--@include sets
--@include ready
--@include insert
local meta_key, counter_key = KEYS[1], KEYS[2]
local records_key, now = ARGV[2], to_ms(ARGV[3])
local UNIFORM = string.byte(ARGV[4], 1) == 117  -- 'u'
local n = tonumber(UNIFORM and string.sub(ARGV[4], 2) or ARGV[4])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
local ready_offset = (#KEYS - 2) / 2
local first = nil
if UNIFORM then
  if n == 0 then
    return {}
  end
  first = redis.call('HINCRBY', counter_key, 'id', n) - n + 1
  if one_width(first, first + n - 1) then
    return insert_uniform(records_key, now, 5, n, first, ready_offset)
  end
  -- the call as five values a job
  local t = {ARGV[1], ARGV[2], ARGV[3], string.format('%d', n)}
  for j = 1, n do
    local a = #t
    t[a + 1], t[a + 2], t[a + 3], t[a + 4], t[a + 5] = ARGV[5], ARGV[8 + j], ARGV[6], ARGV[7], ARGV[8]
  end
  ARGV = t
end
local slots = {}
for j = 1, n do
  slots[j] = 5 * j
end
return insert_jobs(counter_key, records_key, now, slots, ready_offset, nil, first)
