-- Claim due entries of a work list (the monitor's stored requests) for one instance:
-- each is pushed a lease into the future, so another instance takes it only if this
-- one dies before finishing it (then it is answered again: handlers are idempotent).
-- KEYS[1]  the work list (zset of entry JSON, score = when due)
-- ARGV[1]  now (seconds)
-- ARGV[2]  lease expiry time for the entries claimed
-- ARGV[3]  entries to claim at most
-- Returns: the entries claimed.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, entry in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], entry)
end
return due
