-- A job whose heartbeat expired: move all its queued tasks back to seeds and drop it
-- from the registry, atomically (thesis 4.2.1.3). Does nothing if the job beat again.
-- KEYS[1]  the job's domains (set)
-- KEYS[2]  the job registry (zset job -> last heartbeat)
-- KEYS[3]  the job's info (string)
-- ARGV[1]  queue key template, string.format(template, job, domain)
-- ARGV[2]  the job id
-- ARGV[3]  heartbeat cutoff: requeue only if the last heartbeat is at or before it
-- ARGV[4]  seeds key template, string.format(template, spider type)
-- Returns: tasks moved back to seeds, or -1 if the job is alive.
local beat = redis.call('ZSCORE', KEYS[2], ARGV[2])
if beat and tonumber(beat) > tonumber(ARGV[3]) then return -1 end
local moved = 0
for _, domain in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local queue = string.format(ARGV[1], ARGV[2], domain)
  local tasks = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
  for i = 1, #tasks, 2 do
    local spider_type = string.match(tasks[i], '"spider_type":"([^"]*)"')
    redis.call('ZADD', string.format(ARGV[4], spider_type), tasks[i + 1], tasks[i])
    moved = moved + 1
  end
  redis.call('DEL', queue)
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
return moved
