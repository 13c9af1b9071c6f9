-- A queue's dedup key records (#17): per key, the job that last took it and until when its
-- window holds the key. A table of ours beside the original's jobs tables, which the original
-- server never reads; made with the queue, or by the first dedup enqueue of a queue made
-- without it (by the original, or before this table existed).
-- {table}: `plq_{shard}_{queue}`.`dedup_keys` from names.py.
-- key_hash: SHA-256 of the key's UTF-8 bytes, the primary key (a key of up to 1,024 bytes is
-- longer than some row formats let an index be). dedup_key: the key's UTF-8 bytes, binary, so
-- compared byte for byte (utf8mb4_bin would pad spaces: 'a' = 'a ').
-- priority, local_id: the holder (0, 0 while a dedup enqueue is taking a new key: no job).
-- held_until: the holder's enqueue time plus its window, ms since the epoch.
CREATE TABLE IF NOT EXISTS {table} (
  key_hash BINARY(32) NOT NULL,
  dedup_key VARBINARY(1024) NOT NULL,
  priority TINYINT UNSIGNED NOT NULL DEFAULT 0,
  local_id BIGINT UNSIGNED NOT NULL DEFAULT 0,
  held_until BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (key_hash),
  INDEX job (priority, local_id),
  INDEX held_until (held_until)
) ENGINE=InnoDB
