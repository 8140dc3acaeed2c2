-- Re-issue hub pages (seed 000) whose refresh span has passed, bypassing the filter,
-- so new links on index pages are found; each is due again a span later. A hub
-- still waiting in the pool is not issued twice; a stopped crawl's hubs are dropped, a
-- paused crawl's wait for the next span. Every key is of the shard of KEYS[1].
-- KEYS[1]  the shard's hubs (zset of hub task JSON, score = when next due)
-- ARGV[1]  now (seconds)
-- ARGV[2]  hubs to handle at most
-- ARGV[3]  pending hash key template, string.format(template, crawlid)
-- ARGV[4]  counts hash key template, string.format(template, crawlid)
-- ARGV[5]  the shard's stopped crawls (hash crawl id -> when)
-- ARGV[6]  the shard's paused crawls (hash crawl id -> when)
-- ARGV[7]  pool key template, string.format(template, spider type)
-- KEYS[2]  the shard's hub state (an adaptively revisited hub's span is there)
-- Returns: hubs re-issued.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local issued = 0
for _, member in ipairs(due) do
  local task = cjson.decode(member)
  if redis.call('HEXISTS', ARGV[5], task['crawlid']) == 1 then
    redis.call('ZREM', KEYS[1], member)
  else
    local paused = redis.call('HEXISTS', ARGV[6], task['crawlid']) == 1
    local pool = string.format(ARGV[7], task['spider_type'])
    if not paused and redis.call('ZADD', pool, -(task['priority'] or 0), member) == 1 then
      redis.call('HINCRBY', string.format(ARGV[3], task['crawlid']), task['domain'], 1)
      redis.call('HINCRBY', string.format(ARGV[4], task['crawlid']), 'queued', 1)
      issued = issued + 1
    end
    local span = tonumber(task['hub_span'])
    local state = redis.call('HGET', KEYS[2], task['url'])
    if state then span = tonumber(cjson.decode(state)['span']) end
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + span, member)
  end
end
return issued
