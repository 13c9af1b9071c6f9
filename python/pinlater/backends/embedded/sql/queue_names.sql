-- Every queue on the shard. Returns: name.
SELECT name FROM queues
