-- A job that stopped beating or closed: move its queued tasks of one shard back to the
-- shard's pool (thesis 4.2.1.3) and forget its domains there, atomically. The caller
-- does every shard, then removes the job from the registry. Every key is of the shard
-- of KEYS[1].
-- KEYS[1]  the job's domains in the shard (set)
-- ARGV[1]  queue key template, string.format(template, job, domain)
-- ARGV[2]  the job id
-- ARGV[3]  pool key template, string.format(template, spider type)
-- Returns: tasks moved back to the pool.
local moved = 0
for _, domain in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local queue = string.format(ARGV[1], ARGV[2], domain)
  local tasks = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
  for i = 1, #tasks, 2 do
    local spider_type = string.match(tasks[i], '"spider_type":"([^"]*)"')
    redis.call('ZADD', string.format(ARGV[3], spider_type), tasks[i + 1], tasks[i])
    moved = moved + 1
  end
  redis.call('DEL', queue)
end
redis.call('DEL', KEYS[1])
return moved
