-- How many jobs of each queue expired (queues that never had an expiring job have no row).
-- Returns: queue, expired.
SELECT queue, expired FROM expiries
