-- group_job_record.sql for many new jobs in one statement. Params: :queue, :rows (a JSON array
-- of [local_id, group_key, waiting (0/1)]).
INSERT INTO group_jobs (local_id, queue, group_key, waiting)
SELECT json_extract(value, '$[0]'), :queue, json_extract(value, '$[1]'), json_extract(value, '$[2]')
  FROM json_each(:rows)
