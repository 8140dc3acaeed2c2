-- Rolling-window counter (thesis 4.1.1 RollingTimeCounter) in one hash of per-second
-- buckets: field <second> -> events in that second, "sum" -> events in the window,
-- "from" -> the oldest second the sum may still hold. Each call drops the seconds that
-- left the window (subtracting them from the sum), adds COUNT events to the current
-- second and returns the sum: a few commands per call however many events it adds, and
-- at most one field per second of the window. Exact to the second: the events of second
-- s count while s > now - window. Times are passed in (never read from the server) so a
-- clock can be injected.
-- KEYS[1]  the counter's hash
-- ARGV[1]  now, seconds since the epoch
-- ARGV[2]  the window in seconds
-- ARGV[3]  TTL in seconds, so an idle counter disappears by itself
-- ARGV[4]  number of events to record (0 only trims and counts)
-- Returns: events in the window.
local now, window, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local first = math.floor(now - window) + 1          -- the oldest second still counted
local state = redis.call('HMGET', KEYS[1], 'from', 'sum')
local from, sum = tonumber(state[1]), tonumber(state[2]) or 0
if from and from < first then
  local gone = {}
  if first - from <= window + 1 then
    for second = from, first - 1 do gone[#gone + 1] = tostring(second) end
  else                                               -- idle past a window: look at all
    for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
      local second = tonumber(field)
      if second and second < first then gone[#gone + 1] = field end
    end
  end
  for start = 1, #gone, 7000 do
    local piece = {unpack(gone, start, math.min(start + 6999, #gone))}
    for _, events in ipairs(redis.call('HMGET', KEYS[1], unpack(piece))) do
      sum = sum - (tonumber(events) or 0)
    end
    redis.call('HDEL', KEYS[1], unpack(piece))
  end
end
if count > 0 then
  redis.call('HINCRBY', KEYS[1], tostring(math.floor(now)), count)
  sum = sum + count
end
if count > 0 or from then
  redis.call('HSET', KEYS[1], 'from', math.max(from or first, first), 'sum', sum)
end
if count > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return sum
