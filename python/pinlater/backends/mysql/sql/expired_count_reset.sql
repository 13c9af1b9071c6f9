-- The Rust ack's tally of the expiries of one round trip of statements (a session variable):
-- set to 0 before them, raised after each ack_expire_jobs.sql (expired_count_tally.sql), and
-- counted by expired_count_add_tallied.sql, all before the COMMIT of the same round trip.
SET @pinlater_expired = 0
