-- Re-issue one shard's tasks whose lease expired unacknowledged (seed 000's pending
-- timeout): back to the pool with one more attempt, or failed for good once the attempts
-- are used up; a task of a stopped crawl is purged, one of a paused crawl parked. Every
-- key is of the shard of KEYS[1].
-- KEYS[1]  the shard's leases (zset of task JSON, score = lease expiry; a dead job's
--          were set to expire at once by requeue_job.lua)
-- KEYS[2]  the shard's lease owners (hash task JSON -> job)
-- ARGV[1]  now (seconds)
-- ARGV[2]  leases to handle at most
-- ARGV[3]  attempts allowed per URL
-- ARGV[4]  failed-URLs hash key template, string.format(template, crawlid)
-- ARGV[5]  pending hash key template, string.format(template, crawlid)
-- ARGV[6]  counts hash key template, string.format(template, crawlid)
-- ARGV[7]  the shard's stopped crawls (hash crawl id -> when)
-- ARGV[8]  the shard's paused crawls (hash crawl id -> when)
-- ARGV[9]  parked set key template, string.format(template, crawlid)
-- ARGV[10] pool key template, string.format(template, spider type)
-- Returns: {tasks re-issued, tasks failed for good or purged}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local requeued, failed = 0, 0
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('HDEL', KEYS[2], member)
  local task = cjson.decode(member)
  local crawlid = task['crawlid']
  task['attempts'] = (task['attempts'] or 0) + 1
  local stopped = redis.call('HEXISTS', ARGV[7], crawlid) == 1
  if task['attempts'] < tonumber(ARGV[3]) and not stopped then
    local back = string.format(ARGV[10], task['spider_type'])
    if redis.call('HEXISTS', ARGV[8], crawlid) == 1 then
      back = string.format(ARGV[9], crawlid)
    end
    redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
    requeued = requeued + 1
  else
    local field = 'purged'
    if not stopped then
      field = 'failed'
      redis.call('HSET', string.format(ARGV[4], crawlid), task['url'],
        cjson.encode({reason = 'lease expired', attempts = task['attempts']}))
    end
    local pending = string.format(ARGV[5], crawlid)
    if redis.call('HINCRBY', pending, task['domain'], -1) <= 0 then
      redis.call('HDEL', pending, task['domain'])
    end
    redis.call('HINCRBY', string.format(ARGV[6], crawlid), field, 1)
    failed = failed + 1
  end
end
return {requeued, failed}
