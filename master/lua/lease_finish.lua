-- A job reports how a leased task ended (seed 000's URL states): "done", "retry"
-- (counts an attempt; past the limit the URL fails for good), "failed" (for good
-- now, e.g. 404/410) or "release" (not attempted: back to seeds as it was, e.g. the
-- job is closing). A lease that already expired and was re-issued is left alone. A
-- task of a stopped crawl that would go back to seeds is purged instead; one of a
-- paused crawl is parked.
-- KEYS[1]  leases (zset of task JSON, score = lease expiry)
-- KEYS[2]  seeds of the task's spider type (zset of task JSON, score -priority)
-- KEYS[3]  the task's crawl's failed URLs (hash url -> JSON reason)
-- KEYS[4]  the crawl's pending hash (domain -> tasks)
-- KEYS[5]  the crawl's counts hash
-- KEYS[6]  the crawl's stopped flag
-- KEYS[7]  the crawl's paused flag
-- KEYS[8]  the crawl's parked set
-- ARGV[1]  the task JSON exactly as taken
-- ARGV[2]  outcome: "done", "retry", "failed" or "release"
-- ARGV[3]  reason (for retry and failed)
-- ARGV[4]  attempts allowed per URL
-- Returns: 0 lease not held, 1 done, 2 queued again, 3 failed for good, 4 purged.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local task = cjson.decode(ARGV[1])
local function finished(field, code)
  if redis.call('HINCRBY', KEYS[4], task['domain'], -1) <= 0 then
    redis.call('HDEL', KEYS[4], task['domain'])
  end
  redis.call('HINCRBY', KEYS[5], field, 1)
  return code
end
if ARGV[2] == 'done' then return finished('done', 1) end
local stopped = redis.call('EXISTS', KEYS[6]) == 1
local back = KEYS[2]
if redis.call('EXISTS', KEYS[7]) == 1 then back = KEYS[8] end
if ARGV[2] == 'release' then
  if stopped then return finished('purged', 4) end
  redis.call('ZADD', back, -(task['priority'] or 0), ARGV[1])
  return 2
end
task['attempts'] = (task['attempts'] or 0) + 1
if ARGV[2] == 'retry' and task['attempts'] < tonumber(ARGV[4]) then
  if stopped then return finished('purged', 4) end
  redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
  return 2
end
redis.call('HSET', KEYS[3], task['url'],
  cjson.encode({reason = ARGV[3], attempts = task['attempts']}))
return finished('failed', 3)
