-- Run on every new connection (PyMySQL's init_command).
-- TIMESTAMP columns are stored in UTC and converted through the session time zone; with UTC
-- here, the datetimes we send and read are plain UTC and never shift with DST.
SET time_zone = '+00:00'
