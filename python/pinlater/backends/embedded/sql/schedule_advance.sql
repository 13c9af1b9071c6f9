-- Move a schedule's next tick only if it is still :expected_next_ms (compare-and-set: of two
-- servers that fired one tick, one moves it). Params: :queue, :name, :expected_next_ms, :next_run_ms.
UPDATE schedules SET next_run_ms = :next_run_ms
 WHERE queue = :queue AND name = :name AND next_run_ms = :expected_next_ms
