-- order: members put in (score, id) order as numbers, each text read once (scripts that say
-- `--@include order` get this file pasted in). Redis answers scores and members as text, and
-- reading a text as a number (strtod) costs more than the rest of a comparison: a sort that read
-- both texts at each comparison read each about 2 log2(n) times, the bulk of a dequeue's Lua.

-- `ids` (the members of one score as Redis answers them: decimal text, in text order) sorted in
-- place by their value. Ids of one length (the common case: a batch's consecutive ids) are in
-- that order already, and are left as they are without reading one as a number.
local function sort_ids(ids)
  local length, mixed = #(ids[1] or ''), false
  for i = 2, #ids do
    if #ids[i] ~= length then
      mixed = true
      break
    end
  end
  if not mixed then
    return
  end
  local values, text_of = {}, {}
  for i, id in ipairs(ids) do
    local n = tonumber(id)
    if n == nil or text_of[n] then  -- not a number, or two texts of one: read at each comparison
      table.sort(ids, function(x, y) return tonumber(x) < tonumber(y) end)
      return
    end
    values[i], text_of[n] = n, id
  end
  table.sort(values)
  for i, n in ipairs(values) do
    ids[i] = text_of[n]
  end
end

-- Whether x comes before y, by score, then by id: entries as sort_entries leaves them (their
-- numbers in .s and .n).
local function before(x, y)
  if x.s ~= y.s then
    return x.s < y.s
  end
  return x.n < y.n
end

-- `entries` ({id, score, ...}, both text) put in (score, id) order as numbers: each entry gets
-- .s and .n, an equal score text is read once for all, and the entries are sorted only when
-- out of order (a ZRANGEBYSCORE page is in order, unless ids of different lengths share a score).
local function sort_entries(entries)
  local score_of = {}
  local in_order = true
  for i, e in ipairs(entries) do
    local s = score_of[e[2]]
    if not s then
      s = tonumber(e[2])
      score_of[e[2]] = s
    end
    e.s, e.n = s, tonumber(e[1])
    if in_order and i > 1 and before(e, entries[i - 1]) then
      in_order = false
    end
  end
  if not in_order then
    table.sort(entries, before)
  end
end
