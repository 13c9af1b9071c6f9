-- Delete up to a limit of jobs of one state in a run_after range.
-- {table}: the priority's jobs table.
-- %s: state, run_after from, run_after to (both inclusive), limit.
DELETE FROM {table}
 WHERE state = %s AND run_after >= %s AND run_after <= %s
 LIMIT %s
