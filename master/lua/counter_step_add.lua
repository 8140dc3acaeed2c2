-- Fixed-window counter (thesis 4.1.1 StepTimeCounter): record COUNT events in
-- the sorted set of the window that holds NOW; the set expires on its own
-- once it is older than the windows the counter keeps.
-- KEYS[1]  the window's sorted set (member: unique event id, score: event time)
-- ARGV[1]  now, seconds since the epoch
-- ARGV[2]  TTL in seconds: until the window is older than those kept
-- ARGV[3]  number of events to record (> 0)
-- ARGV[4]  unique prefix for this call's members
-- Returns: events recorded in this window so far.
for i = 1, tonumber(ARGV[3]) do
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4] .. ':' .. i)
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return redis.call('ZCARD', KEYS[1])
