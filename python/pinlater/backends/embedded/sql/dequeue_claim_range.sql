-- dequeue_claim_rows.sql for the jobs whose ids are every id from :first to :last (the jobs a
-- dequeue read are mostly the jobs of an enqueue or two, which one INSERT each made consecutive):
-- one seek into the rowid range and a walk along it, instead of a seek per id and the JSON array
-- read into a temporary index. The Rust writer runs it once per range of the ids it read (up to
-- a few ranges, else dequeue_claim_rows.sql), and only over ranges those ids fill, so no other
-- job is in one: it claims exactly what dequeue_claim_rows.sql would.
-- Params: :queue, :priority, :first, :last, :claim, :now_ms.
UPDATE OR FAIL jobs
   SET state = 1, claim_descriptor = :claim, updated_at_ms = :now_ms
 WHERE local_id BETWEEN :first AND :last
   AND +queue = :queue AND +priority = :priority AND +state = 0
