--[[ retry_failed_jobs: move up to ARGV[5] FAILED jobs of one priority back to PENDING.

As lua/retry_failed_jobs.lua, in the compact layout, with one HMGET and one HSET of records and
one ZADD for the batch. Oldest failures first. Each moved job gets ar = ARGV[3] (al is left as it
was, as the original did), its claim removed, ua = now, and a PENDING score of ARGV[4] (in ms).
A member whose record is missing (evicted) is removed and counted, not moved.

KEYS[1]  the queue's records hash (plc:{S:Q}:j), with its fields c and id
KEYS[2]  PENDING sorted set (plc:{S:Q}:p{p}:s0)
KEYS[3]  FAILED sorted set (plc:{S:Q}:p{p}:s3)
KEYS[4]  expiry index (plc:{S:Q}:xe)
ARGV[1]  queue name
ARGV[2]  the records hash (plc:{S:Q}:j)
ARGV[3]  attempts remaining to set
ARGV[4]  run after, seconds as float
ARGV[5]  limit
ARGV[6]  now, seconds as float
ARGV[7]  the priority (of KEYS[2] and KEYS[3])
after the KEYS above, last before the tail's: the dedup records and runs (plc:{S:Q}:dk, :dr;
keys_compact.dedup_end_keys): a job that ends forgets its dedup key (lib/dedup.lua, forget_keys)
then the rules and group keys at the end of ARGV and KEYS (lib/groups.lua's tail): a job of an
ordered group goes back in its group (lib/groups.lua's join_group) at its old place in the line
(its record's gq: before the jobs enqueued after it that still wait, even the line's head, where
an enqueue always joins last), the jobs of a group in line order: active only if there is room
and nothing waits, else waiting.

A moved job loses its expiry (ex, and its entry in the expiry index, if any): an operator who
puts a job back wants it run. A moved job with a dedup key (dk) holds it again while it is active,
unless another job holds it or took it since (lib/dedup.lua, retake_keys).

Returns {moved, evicted}, or -1 if the queue does not exist.
]]
--@include records
--@include sets
--@include groups
--@include dedup
local meta_key, pending_key, failed_key = KEYS[1], KEYS[2], KEYS[3]
local records_key, attempts, run_after = ARGV[2], tonumber(ARGV[3]), to_ms(ARGV[4])
local limit, now = tonumber(ARGV[5]), to_ms(ARGV[6])
if redis.call('HEXISTS', meta_key, 'c') == 0 then
  return -1
end
if limit <= 0 then
  return {0, 0}
end
local ids = redis.call('ZRANGE', failed_key, 0, limit - 1)
if #ids > 0 then
  redis.call('ZREMRANGEBYRANK', failed_key, 0, #ids - 1)
end
local jobs = read_records(records_key, ids)
-- A group's jobs rejoin in line order (by place, then id), not in the order they failed: the
-- first to join a group with room runs first, whatever its place.
table.sort(ids, function(a, b)
  local ja, jb = jobs[a], jobs[b]
  local pa, pb = ja and ja.gq or tonumber(a), jb and jb.gq or tonumber(b)
  if pa ~= pb then
    return pa < pb
  end
  return tonumber(a) < tonumber(b)
end)
local rules, priority = rules_tail(7), tonumber(ARGV[7])
local dedup_records_key, dedup_runs_key = dedup_end_keys(rules)
local moved, pending, cleared, keyed = {}, {}, {}, {}
for _, id in ipairs(ids) do
  local job = jobs[id]
  if job then
    job.ar, job.cd, job.ua = attempts, false, now
    if job.ex then
      job.ex = nil
      cleared[#cleared + 1] = id
    end
    moved[#moved + 1] = id
    if job.dk then
      keyed[#keyed + 1], keyed[#keyed + 2] = id, job.dk
    end
    if not job.gr then
      pending[#pending + 1] = id
    else
      if join_group(rules, job.gr, job, id, priority, run_after, now) then
        pending[#pending + 1] = id
      end
    end
  end
end
write_records(records_key, moved, jobs)
zadd_all(pending_key, run_after, pending)
zrem_all(KEYS[4], cleared)
retake_keys(dedup_records_key, dedup_runs_key, keyed, priority)
return {#moved, #ids - #moved}
