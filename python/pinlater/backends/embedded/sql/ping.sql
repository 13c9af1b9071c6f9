-- Read a page of the file, so a ping notices a file that went away or went bad.
SELECT count(*) FROM (SELECT 1 FROM queues LIMIT 1)
