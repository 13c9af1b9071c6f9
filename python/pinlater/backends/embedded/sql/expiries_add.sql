-- Count :count more expired jobs of a queue. Params: :queue, :count.
UPDATE OR FAIL expiries SET expired = expired + :count WHERE queue = :queue
