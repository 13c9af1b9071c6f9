-- The local id the next job inserted gets: AUTOINCREMENT gives one above both the highest id
-- ever handed out (its counter) and the highest in the table, whichever is larger. Read in the
-- write transaction that inserts it, so nobody else inserts in between.
SELECT max(ifnull((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),
           ifnull((SELECT max(local_id) FROM jobs), 0)) + 1
