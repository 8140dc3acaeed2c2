-- A job that stopped beating or closed: move its queued tasks of one shard back to the
-- shard's pool (thesis 4.2.1.3) and forget its domains there, and make the leases it
-- holds in the shard expire now (lease_reap.lua, run next by the caller, re-issues them
-- with one more attempt: they may have been fetched), atomically. The caller first marks
-- the job closed in every shard (dispatch.lua then queues nothing more for it), runs this
-- in each shard where the job has queues or leases may be held, then removes the job
-- from the registry. Every key is of the shard of KEYS[1].
-- KEYS[1]  the job's domains in the shard (set)
-- KEYS[2]  the shard's leases (zset of task JSON, score = lease expiry)
-- KEYS[3]  the shard's lease owners (hash task JSON -> job)
-- ARGV[1]  queue key template, string.format(template, job, domain)
-- ARGV[2]  the job id
-- ARGV[3]  pool key template, string.format(template, spider type)
-- Returns: {tasks moved back to the pool, leases made to expire}
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
local expired = 0
if redis.call('HLEN', KEYS[3]) > 0 then
  local owners = redis.call('HGETALL', KEYS[3])
  for i = 1, #owners, 2 do
    if owners[i + 1] == ARGV[2] then
      expired = expired + redis.call('ZADD', KEYS[2], 'XX', 'CH', 0, owners[i])
    end
  end
end
return {moved, expired}
