-- The highest local id ever handed out (AUTOINCREMENT's counter). Right after a batch insert in
-- the same write transaction, the batch holds the ids up to this one, consecutively.
SELECT seq FROM sqlite_sequence WHERE name = 'jobs'
