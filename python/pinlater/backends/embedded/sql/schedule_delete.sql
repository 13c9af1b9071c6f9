-- Remove a schedule. Params: :queue, :name.
DELETE FROM schedules WHERE queue = :queue AND name = :name
