-- Resume a paused crawl in one shard, a slice at a time: its parked tasks go back to the
-- shard's pool. Every key is of the shard of KEYS[1].
-- KEYS[1]  the crawl's parked set in the shard (zset of task JSON, score -priority)
-- ARGV[1]  tasks to move at most
-- ARGV[2]  pool key template, string.format(template, spider type)
-- Returns: tasks moved (0 when none are left).
local parked = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
for i = 1, #parked, 2 do
  local spider_type = string.match(parked[i], '"spider_type":"([^"]*)"')
  redis.call('ZADD', string.format(ARGV[2], spider_type), parked[i + 1], parked[i])
  redis.call('ZREM', KEYS[1], parked[i])
end
return #parked / 2
