-- after: a sorted set of job ids read newest first from a point (scan_jobs.lua's paged scans,
-- in both layouts: lua_compact's scan_jobs includes it from here), in the set's own order read
-- backwards: score descending, equal scores by id as text descending (Redis orders equal scores
-- by member). Every step is a rank lookup (O(log n)) or a range of the members returned: a page
-- costs the same 100,000 members deep as at the top, and the point need not be a member (it may
-- be gone, or never have been in this set).

-- How many members come before the point (score, id) in the set's ascending order. The point's
-- own member, if there with that score, is answered by ZRANK; otherwise the ids of that score
-- (a contiguous run of ranks) are searched by halving, one ZRANGE of one rank per step.
local function rank_of_point(key, score, id)
  local there = redis.call('ZSCORE', key, id)
  if there and tonumber(there) == tonumber(score) then
    return redis.call('ZRANK', key, id)
  end
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', key, score, score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local member = redis.call('ZRANGE', key, mid, mid)[1]
    if member < id then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

-- How many members score below a ZRANGEBYSCORE low bound ('-inf', '(x' or 'x').
local function count_below(key, low)
  if low == '-inf' then
    return 0
  end
  if string.sub(low, 1, 1) == '(' then
    return redis.call('ZCOUNT', key, '-inf', string.sub(low, 2))
  end
  return redis.call('ZCOUNT', key, '-inf', '(' .. low)
end

-- Up to `n` members within the bounds that come after the point (score, id) newest first (all
-- of the range when score is nil), as {id, score} pairs, newest first. Scores are text, as the
-- set's units (the caller converts).
local function newest_after(key, low, high, score, id, n)
  local out = {}
  if n <= 0 then
    return out
  end
  local stop = redis.call('ZCOUNT', key, '-inf', high)  -- ranks [0, stop) are <= high
  if score then
    stop = math.min(stop, rank_of_point(key, score, id))
  end
  local start = math.max(count_below(key, low), stop - n)
  if start >= stop then
    return out
  end
  local page = redis.call('ZRANGE', key, start, stop - 1, 'WITHSCORES')
  for i = #page - 1, 1, -2 do
    out[#out + 1] = {page[i], page[i + 1]}
  end
  return out
end

-- Whether a comes before b newest first ({id, score} pairs; ids unique across the sets merged).
local function newer(a, b)
  local sa, sb = tonumber(a[2]), tonumber(b[2])
  if sa ~= sb then
    return sa > sb
  end
  return a[1] > b[1]
end
