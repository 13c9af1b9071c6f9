-- Create a queue's database on one shard (idempotent).
-- {database}: `plq_{shard}_{queue}` from names.py.
-- utf8mb4 with a binary collation: custom statuses keep any character, and claim descriptors
-- compare exactly. A database the original created keeps its own character set.
CREATE DATABASE IF NOT EXISTS {database} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
