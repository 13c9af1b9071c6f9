-- Drop a queue's database on one shard, with all its jobs (idempotent).
-- {database}: `plq_{shard}_{queue}` from names.py.
DROP DATABASE IF EXISTS {database}
