-- Count events in per-minute buckets of one hash, plus a lifetime total; a bucket
-- older than the longest window is deleted when a new minute starts.
-- KEYS[1]  the counter's hash (minute -> events, "lifetime" -> events)
-- ARGV[1]  the current minute (floor(now / 60))
-- ARGV[2]  events to add
-- ARGV[3]  the oldest minute to keep
-- Returns: events in the current minute.
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'lifetime', tonumber(ARGV[2]))
if count == tonumber(ARGV[2]) then
  local oldest = tonumber(ARGV[3])
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local minute = tonumber(field)
    if minute and minute < oldest then redis.call('HDEL', KEYS[1], field) end
  end
end
return count
