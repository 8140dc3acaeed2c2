-- Jobs report how leased tasks ended (seed 000's URL states), many in one call: "done",
-- "retry" (counts an attempt; past the limit the URL fails for good), "failed" (for
-- good now, e.g. 404/410) or "release" (not attempted: back to the pool as it was, e.g.
-- the job is closing). A lease that already expired and was re-issued is left alone.
-- A task of a stopped crawl that would go back to the pool is purged instead; one of a
-- paused crawl is parked. Every key is of the shard of KEYS[1]. The leases are looked up,
-- removed and their owners forgotten in one command each, and the counts are added once
-- per crawl and domain, not per task.
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
-- ARGV[9]  releases for pushback a task may have (a release whose reason begins
--          "pushback" or names "robots.txt unavailable" is counted in the task's
--          "releases"; past this many it fails for good instead)
-- ARGV[10..] per task: the task JSON exactly as taken, outcome, reason, its crawl id, its
--          domain
-- Returns: per task, 0 lease not held, 1 done, 2 queued again, 3 failed for good,
-- 4 purged.
local allowed, max_releases = tonumber(ARGV[1]), tonumber(ARGV[9])

-- command(key, args...) in pieces small enough for unpack.
local function batched(command, key, args)
  for start = 1, #args, 7000 do
    redis.call(command, key, unpack(args, start, math.min(start + 6999, #args)))
  end
end

local members = {}
for i = 10, #ARGV, 5 do members[#members + 1] = ARGV[i] end
local held, taken = {}, {}
for start = 1, #members, 7000 do
  local scores = redis.call('ZMSCORE', KEYS[1],
                            unpack(members, start, math.min(start + 6999, #members)))
  for n, score in ipairs(scores) do
    local member = members[start + n - 1]
    if score and not held[member] then
      held[member] = true
      taken[#taken + 1] = member
    end
  end
end
batched('ZREM', KEYS[1], taken)
batched('HDEL', KEYS[2], taken)

local crawls = {}                            -- crawl id -> its keys, flags and changes
local function crawl_of(crawlid)
  local crawl = crawls[crawlid]
  if not crawl then
    crawl = {pending = string.format(ARGV[3], crawlid), counts = string.format(ARGV[4], crawlid),
             domains = {}, fields = {}}      -- pending changes by domain; counts by field
    crawls[crawlid] = crawl
  end
  return crawl
end

-- A task that leaves for good: one less pending in its domain, one more under ``field``.
local function finished(crawl, domain, field, code)
  crawl.domains[domain] = (crawl.domains[domain] or 0) - 1
  crawl.fields[field] = (crawl.fields[field] or 0) + 1
  return code
end

local function finish(member, outcome, reason, crawlid, domain)
  if not held[member] then return 0 end
  held[member] = nil                        -- the same task twice in one call counts once
  local crawl = crawl_of(crawlid)
  if outcome == 'done' then return finished(crawl, domain, 'done', 1) end
  if crawl.stopped == nil then
    crawl.stopped = redis.call('HEXISTS', ARGV[5], crawlid) == 1
    crawl.paused = redis.call('HEXISTS', ARGV[6], crawlid) == 1
  end
  local task = cjson.decode(member)
  local back = string.format(ARGV[8], task['spider_type'])
  if crawl.paused then back = string.format(ARGV[7], crawlid) end
  if outcome == 'release' then
    if crawl.stopped then return finished(crawl, domain, 'purged', 4) end
    if string.sub(reason, 1, 8) ~= 'pushback'
        and not string.find(reason, 'robots.txt unavailable', 1, true) then
      redis.call('ZADD', back, -(task['priority'] or 0), member)
      return 2
    end
    task['releases'] = (task['releases'] or 0) + 1
    if task['releases'] <= max_releases then
      redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
      return 2
    end
    redis.call('HSET', string.format(ARGV[2], crawlid), task['url'],
      cjson.encode({reason = 'pushback: released ' .. max_releases .. ' times (last: '
                    .. reason .. ')', attempts = task['attempts'] or 0}))
    return finished(crawl, domain, 'failed', 3)
  end
  task['attempts'] = (task['attempts'] or 0) + 1
  if outcome == 'retry' and task['attempts'] < allowed then
    if crawl.stopped then return finished(crawl, domain, 'purged', 4) end
    redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
    return 2
  end
  redis.call('HSET', string.format(ARGV[2], crawlid), task['url'],
    cjson.encode({reason = reason, attempts = task['attempts']}))
  return finished(crawl, domain, 'failed', 3)
end

local codes = {}
for i = 10, #ARGV, 5 do
  codes[#codes + 1] = finish(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
end
for _, crawl in pairs(crawls) do
  for domain, change in pairs(crawl.domains) do
    if redis.call('HINCRBY', crawl.pending, domain, change) <= 0 then
      redis.call('HDEL', crawl.pending, domain)
    end
  end
  for field, count in pairs(crawl.fields) do redis.call('HINCRBY', crawl.counts, field, count) end
end
return codes
