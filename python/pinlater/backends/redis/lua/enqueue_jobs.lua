--[[ enqueue_jobs: insert a batch of PENDING jobs (any mix of priorities) in one call.

Ids come from the queue's counter (one INCRBY for the batch), so they are consecutive and in the
order of the jobs. Each job gets a hash and a member in its priority's PENDING set, scored by its
run-after time (lib/insert.lua, shared with enqueue_keyed_jobs.lua).

KEYS[1]     queue names sorted set (pln_{shard})
KEYS[2]     the queue's id counter (plj_{shard}_{queue})
KEYS[3..n]  PENDING sorted sets of the priorities in the batch (plq_{shard}_{queue}.p{p}_s0)
ARGV[1]     queue name
ARGV[2]     job hash key prefix (plh_{shard}_{queue}.)
ARGV[3]     now, seconds as float (ca and ua)
ARGV[4]     number of jobs, n
then 5 per job, in order:
  ARGV[i]   index into KEYS of the job's PENDING set
  ARGV[i+1] body (bd)
  ARGV[i+2] attempts allowed (al, and ar)
  ARGV[i+3] run after, seconds as float (the score)
  ARGV[i+4] custom status, already truncated (cs)

Hash fields: bd al ar ca ua cs (keys.JobField).
Returns the local ids in job order, or -1 if the queue does not exist.
]]
--@include insert
local names_key, counter_key = KEYS[1], KEYS[2]
local queue, hash_prefix, now, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not redis.call('ZSCORE', names_key, queue) then
  return -1
end
local slots = {}
for j = 1, n do
  slots[j] = 5 * j
end
return insert_jobs(counter_key, hash_prefix, now, slots)
