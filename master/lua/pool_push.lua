-- Put new tasks of one spider type in one shard's pool, waiting for the dispatcher, and
-- count them as pending for their crawl and domain (the counts `info` answers from). A
-- task of a stopped crawl is not queued; one of a paused crawl is parked (pending, not
-- dispatched) until the crawl resumes. Every key is of the shard of KEYS[1].
-- KEYS[1]  the shard's pool of the spider type (zset of task JSON, score -priority)
-- ARGV[1]  pending hash key template, string.format(template, crawlid)
-- ARGV[2]  counts hash key template, string.format(template, crawlid)
-- ARGV[3]  stopped flag key template, string.format(template, crawlid)
-- ARGV[4]  paused flag key template, string.format(template, crawlid)
-- ARGV[5]  parked set key template, string.format(template, crawlid)
-- ARGV[6..] score, task JSON, score, task JSON, ...
-- Returns: {tasks queued, tasks refused because their crawl is stopped}
local queued, refused, stopped, parked = 0, 0, {}, {}
for i = 6, #ARGV, 2 do
  local member = ARGV[i + 1]
  -- Tasks are canonical JSON; reading two fields beats decoding the whole task.
  local crawlid = string.match(member, '"crawlid":"([^"]*)"')
  local domain = string.match(member, '"domain":"([^"]*)"')
  if stopped[crawlid] == nil then
    stopped[crawlid] = redis.call('EXISTS', string.format(ARGV[3], crawlid)) == 1
    parked[crawlid] = redis.call('EXISTS', string.format(ARGV[4], crawlid)) == 1
  end
  local target = KEYS[1]
  if parked[crawlid] then target = string.format(ARGV[5], crawlid) end
  if stopped[crawlid] then
    refused = refused + 1
  elseif redis.call('ZADD', target, ARGV[i], member) == 1 then
    redis.call('HINCRBY', string.format(ARGV[1], crawlid), domain, 1)
    redis.call('HINCRBY', string.format(ARGV[2], crawlid), 'queued', 1)
    queued = queued + 1
  end
end
return {queued, refused}
