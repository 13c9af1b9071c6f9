-- Run on every new connection (PyMySQL's init_command).
-- TIMESTAMP columns are stored in UTC and converted through the session time zone; with UTC
-- here, the datetimes we send and read are plain UTC and never shift with DST.
-- Strict mode, whatever the server's default: a value too long for its column (a body over the
-- column's size, say) is an error (1406), never silently truncated. The server's other modes stay.
SET time_zone = '+00:00', sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')
