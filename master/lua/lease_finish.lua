-- Jobs report how leased tasks ended (seed 000's URL states), many in one call: "done",
-- "retry" (counts an attempt; past the limit the URL fails for good), "failed" (for
-- good now, e.g. 404/410) or "release" (not attempted: back to the pool as it was, e.g.
-- the job is closing). A lease that already expired and was re-issued is left alone.
-- A task of a stopped crawl that would go back to the pool is purged instead; one of a
-- paused crawl is parked. Every key is of the shard of KEYS[1].
-- KEYS[1]  the shard's leases (zset of task JSON, score = lease expiry)
-- KEYS[2]  the shard's lease owners (hash task JSON -> job)
-- ARGV[1]  attempts allowed per URL
-- ARGV[2]  failed-URLs hash key template, string.format(template, crawlid)
-- ARGV[3]  pending hash key template, string.format(template, crawlid)
-- ARGV[4]  counts hash key template, string.format(template, crawlid)
-- ARGV[5]  the shard's stopped crawls (hash crawl id -> when)
-- ARGV[6]  the shard's paused crawls (hash crawl id -> when)
-- ARGV[7]  parked set key template, string.format(template, crawlid)
-- ARGV[8]  pool key template, string.format(template, spider type)
-- ARGV[9..] per task: the task JSON exactly as taken, outcome, reason
-- Returns: per task, 0 lease not held, 1 done, 2 queued again, 3 failed for good,
-- 4 purged.
local allowed = tonumber(ARGV[1])

local function finish(member, outcome, reason)
  if redis.call('ZREM', KEYS[1], member) == 0 then return 0 end
  redis.call('HDEL', KEYS[2], member)
  local task = cjson.decode(member)
  local crawlid = task['crawlid']
  local function finished(field, code)
    local pending = string.format(ARGV[3], crawlid)
    if redis.call('HINCRBY', pending, task['domain'], -1) <= 0 then
      redis.call('HDEL', pending, task['domain'])
    end
    redis.call('HINCRBY', string.format(ARGV[4], crawlid), field, 1)
    return code
  end
  if outcome == 'done' then return finished('done', 1) end
  local stopped = redis.call('HEXISTS', ARGV[5], crawlid) == 1
  local back = string.format(ARGV[8], task['spider_type'])
  if redis.call('HEXISTS', ARGV[6], crawlid) == 1 then
    back = string.format(ARGV[7], crawlid)
  end
  if outcome == 'release' then
    if stopped then return finished('purged', 4) end
    redis.call('ZADD', back, -(task['priority'] or 0), member)
    return 2
  end
  task['attempts'] = (task['attempts'] or 0) + 1
  if outcome == 'retry' and task['attempts'] < allowed then
    if stopped then return finished('purged', 4) end
    redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
    return 2
  end
  redis.call('HSET', string.format(ARGV[2], crawlid), task['url'],
    cjson.encode({reason = reason, attempts = task['attempts']}))
  return finished('failed', 3)
end

local codes = {}
for i = 9, #ARGV, 3 do
  codes[#codes + 1] = finish(ARGV[i], ARGV[i + 1], ARGV[i + 2])
end
return codes
