-- Re-issue hub pages (seed 000) whose refresh span has passed, bypassing the filter,
-- so new links on index pages are found; each is due again a span later.
-- KEYS[1]  hubs (zset of hub task JSON, score = when next due)
-- KEYS[2]  seeds (zset of task JSON, score -priority)
-- ARGV[1]  now (seconds)
-- ARGV[2]  hubs to handle at most
-- Returns: hubs re-issued.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  local task = cjson.decode(member)
  redis.call('ZADD', KEYS[2], -(task['priority'] or 0), member)
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(task['hub_span']), member)
end
return #due
