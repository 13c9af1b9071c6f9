-- ack_succeeded_many.sql for the acks whose ids are every id from :first to :last (the acks of
-- a dequeue, mostly of the jobs of an enqueue or two: consecutive ids): one seek into the rowid
-- range and a walk along it, instead of a seek per id and the JSON array read into a temporary
-- index. The Rust writer runs it once per range of the acked ids (up to a few ranges, else
-- ack_succeeded_many.sql), and only over ranges those ids fill (repeats aside), so it marks what
-- ack_succeeded_many.sql would, which this must match.
-- Params: :queue, :priority, :first, :last, :append, :status_limit, :now_ms.
UPDATE OR FAIL jobs
   SET state = 2,
       -- no status and nothing to append (most acks): no concatenation and no copy
       custom_status = CASE WHEN :append = '' AND custom_status = '' THEN custom_status
                            ELSE substr(custom_status || :append, 1, :status_limit) END,
       updated_at_ms = :now_ms
 WHERE local_id BETWEEN :first AND :last
   AND +queue = :queue AND +priority = :priority AND +state = 1
