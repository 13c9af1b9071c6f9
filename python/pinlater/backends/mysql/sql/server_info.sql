-- What the store needs to know about the server, read on every new connection.
-- Returns: version, innodb_autoinc_lock_mode (0 or 1: a multi-row INSERT gets consecutive ids),
-- auto_increment_increment (the step between them), max_allowed_packet (bytes).
SELECT VERSION(), @@innodb_autoinc_lock_mode, @@session.auto_increment_increment, @@max_allowed_packet
