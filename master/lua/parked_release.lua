-- Resume a paused crawl, a slice at a time: its parked tasks go back to seeds.
-- KEYS[1]  the crawl's parked set (zset of task JSON, score -priority)
-- KEYS[2]  seeds (zset of task JSON, score -priority)
-- ARGV[1]  tasks to move at most
-- Returns: tasks moved (0 when none are left).
local parked = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
for i = 1, #parked, 2 do
  redis.call('ZADD', KEYS[2], parked[i + 1], parked[i])
  redis.call('ZREM', KEYS[1], parked[i])
end
return #parked / 2
