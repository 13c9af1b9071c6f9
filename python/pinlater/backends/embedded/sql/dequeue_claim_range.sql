-- dequeue_claim_rows.sql for jobs whose ids are every id from :first to :last (a dequeue of jobs
-- one enqueue inserted, the common case): one seek into the rowid range and a walk along it,
-- instead of a seek per id and the JSON array read into a temporary index. Claims exactly what
-- dequeue_claim_rows.sql claims for those ids: the Rust writer uses it only when the ids it read
-- are all of the range, so no other job is in it.
-- Params: :queue, :priority, :first, :last, :claim, :now_ms.
UPDATE jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id BETWEEN :first AND :last
   AND +queue = :queue AND +priority = :priority AND +state = 0
