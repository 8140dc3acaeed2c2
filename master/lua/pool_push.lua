-- Put new tasks of one spider type in one shard's pool, waiting for the dispatcher, and
-- count them as pending for their crawl and domain (the counts `info` answers from). A
-- task of a stopped crawl is not queued; one of a paused crawl is parked (pending, not
-- dispatched) until the crawl resumes. A task with a digest (a spider's new link: its
-- crawl and URL) pushed to the shard within the dedupe window already is not queued
-- again: two jobs that both found the link new, or a push retried after a failed round,
-- queue it once. Every key is of the shard of KEYS[1].
-- KEYS[1]  the shard's pool of the spider type (zset of task JSON, score -priority)
-- KEYS[2]  the shard's recently pushed link digests (zset, score = when pushed)
-- ARGV[1]  pending hash key template, string.format(template, crawlid)
-- ARGV[2]  counts hash key template, string.format(template, crawlid)
-- ARGV[3]  the shard's stopped crawls (hash crawl id -> when)
-- ARGV[4]  the shard's paused crawls (hash crawl id -> when)
-- ARGV[5]  parked set key template, string.format(template, crawlid)
-- ARGV[6]  now (seconds)
-- ARGV[7]  dedupe window (seconds)
-- ARGV[8..] per task: score, task JSON, digest ("" for none: a seed, a hub)
-- Returns: one letter per task: "q" queued (or parked), "s" refused because its crawl is
-- stopped, "r" pushed within the window already, "d" in the pool already as it is.
local codes, stopped, parked = {}, {}, {}
local now, window = tonumber(ARGV[6]), tonumber(ARGV[7])
local pruned = false
local function pushed_before(digest)
  if digest == '' then return false end
  if not pruned then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
    pruned = true
  end
  if redis.call('ZADD', KEYS[2], 'NX', now, digest) == 0 then return true end
  return false
end
for i = 8, #ARGV, 3 do
  local member = ARGV[i + 1]
  -- Tasks are canonical JSON; reading two fields beats decoding the whole task.
  local crawlid = string.match(member, '"crawlid":"([^"]*)"')
  local domain = string.match(member, '"domain":"([^"]*)"')
  if stopped[crawlid] == nil then
    stopped[crawlid] = redis.call('HEXISTS', ARGV[3], crawlid) == 1
    parked[crawlid] = redis.call('HEXISTS', ARGV[4], crawlid) == 1
  end
  local target = KEYS[1]
  if parked[crawlid] then target = string.format(ARGV[5], crawlid) end
  local code = 'd'
  if stopped[crawlid] then
    code = 's'
  elseif pushed_before(ARGV[i + 2]) then
    code = 'r'
  elseif redis.call('ZADD', target, ARGV[i], member) == 1 then
    redis.call('HINCRBY', string.format(ARGV[1], crawlid), domain, 1)
    redis.call('HINCRBY', string.format(ARGV[2], crawlid), 'queued', 1)
    code = 'q'
  end
  codes[#codes + 1] = code
end
-- A shard no spider pushes to any more keeps no digests beyond the window.
if pruned then redis.call('EXPIRE', KEYS[2], math.ceil(window) + 1) end
return table.concat(codes)
