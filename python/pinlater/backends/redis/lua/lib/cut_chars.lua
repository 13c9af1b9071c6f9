-- cut_chars: a custom status cut to a number of characters, as the ack and checkpoint scripts of
-- both layouts cut it (scripts that say `--@include cut_chars` get this file pasted in).

-- `s` cut to its first `limit` UTF-8 characters (a continuation byte starts no character).
local function cut_chars(s, limit)
  if #s <= limit then
    return s
  end
  local count = 0
  for i = 1, #s do
    local b = string.byte(s, i)
    if b < 128 or b >= 192 then
      count = count + 1
      if count > limit then
        return string.sub(s, 1, i - 1)
      end
    end
  end
  return s
end
