-- Whether a queue has an ordered group with an unfinished job (or a bucket), one probe of groups'
-- primary key: an ack of a queue without one cannot make any group move, so it runs the plain ack
-- statements (ack_succeeded.sql) instead of the ones returning each job's group (..._grouped.sql).
-- Params: :queue. Returns: a row, or none.
SELECT 1 FROM groups WHERE queue = :queue LIMIT 1
