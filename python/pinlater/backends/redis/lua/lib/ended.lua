-- ended: what cancel and expiry write, shared by the scripts of both layouts that end a job that
-- way (scripts that say `--@include ended` get this file pasted in, after cut_chars).

-- base.ended_status: `word` after the status cut to its first limit - 1 - #word characters and
-- one space, or alone when the status is empty, so that the word always shows.
local function ended_status(status, word, limit)
  if not status or status == '' then
    return word
  end
  return cut_chars(status, math.max(0, limit - 1 - #word)) .. ' ' .. word
end

local CANCELLED, EXPIRED = 'cancelled', 'expired'

-- keys.CUSTOM_STATUS_LIMIT, for the scripts not passed it (a dequeue's expiry).
local CUSTOM_STATUS_LIMIT = 3000

-- Whether a job with expiry `ex` (ms, or nil/false for none) has expired at `now_ms`.
local function expired_at(ex, now_ms)
  return ex and tonumber(ex) and now_ms >= tonumber(ex) or false
end

-- Seconds as float text (the original layout's times) to integer ms.
local function ms_of(seconds)
  return math.floor(tonumber(seconds) * 1000 + 0.5)
end
