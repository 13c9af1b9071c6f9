-- Give jobs just inserted their expiry (an enqueue with expiries, in its transaction; the
-- INSERT itself keeps the original's column list). ELT(FIELD(local_id, ids...), values...)
-- picks each job's value at its place in the list. updated_at is assigned itself, so its
-- ON UPDATE default does not fire.
-- {table}: the priority's jobs table. {ids}: one %s per job (twice: ids, then values).
-- %s: the ids, the expiries (ms) in the same order, then the ids again.
UPDATE {table}
   SET expire_at = ELT(FIELD(local_id, {ids}), {ids}), updated_at = updated_at
 WHERE local_id IN ({ids})
