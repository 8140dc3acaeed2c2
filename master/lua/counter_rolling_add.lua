-- Rolling-window counter (thesis 4.1.1 RollingTimeCounter): drop events that
-- left the window, record COUNT new events at NOW, return the events left.
-- Times are passed in (never read from the server) so a clock can be injected.
-- KEYS[1]  the counter's sorted set (member: unique event id, score: event time)
-- ARGV[1]  now, seconds since the epoch
-- ARGV[2]  cutoff = now - window; events scored at or before it are removed
-- ARGV[3]  TTL in seconds, so an idle counter disappears by itself
-- ARGV[4]  number of events to record (0 only trims and counts)
-- ARGV[5]  unique prefix for this call's members
-- Returns: events scored after the cutoff.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
local count = tonumber(ARGV[4])
if count > 0 then
  for i = 1, count do
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[5] .. ':' .. i)
  end
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[2], '+inf')
