-- Add the rows the statement just before changed to the tally (see expired_count_reset.sql).
SET @pinlater_expired = @pinlater_expired + ROW_COUNT()
