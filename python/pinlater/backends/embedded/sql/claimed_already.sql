-- Of the jobs of one priority a claim_reserved call names with one claim, those IN_PROGRESS under
-- that claim (claims are unique per dequeue): claimed by this call, or by an earlier run of it
-- whose answer was lost, which the call answers as claimed.
-- Params: :queue, :priority, :ids (JSON array of local ids), :claim.
-- Returns the local ids.
SELECT local_id FROM jobs
 WHERE local_id IN (SELECT value FROM json_each(:ids))
   AND +queue = :queue AND +priority = :priority AND +state = 1 AND claim_descriptor = :claim
