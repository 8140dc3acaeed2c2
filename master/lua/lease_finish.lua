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
-- ARGV[9..] per task: the task JSON exactly as taken, outcome, reason, its crawl id, its
--          domain
-- Returns: per task, 0 lease not held, 1 done, 2 queued again, 3 failed for good,
-- 4 purged.
local allowed = tonumber(ARGV[1])

-- command(key, args...) in pieces small enough for unpack.
local function batched(command, key, args)
  for start = 1, #args, 7000 do
    redis.call(command, key, unpack(args, start, math.min(start + 6999, #args)))
  end
end

local function add(totals, key, field, count)
  totals[key] = totals[key] or {}
  totals[key][field] = (totals[key][field] or 0) + count
end

local members = {}
for i = 9, #ARGV, 5 do members[#members + 1] = ARGV[i] end
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

local pending, counts, crawls = {}, {}, {}  -- totals by key and field; crawl -> keys
local function keys_of(crawlid)
  if not crawls[crawlid] then
    crawls[crawlid] = {pending = string.format(ARGV[3], crawlid),
                       counts = string.format(ARGV[4], crawlid)}
  end
  return crawls[crawlid]
end
local function flags_of(crawlid)
  local crawl = keys_of(crawlid)
  if crawl.stopped == nil then
    crawl.stopped = redis.call('HEXISTS', ARGV[5], crawlid) == 1
    crawl.paused = redis.call('HEXISTS', ARGV[6], crawlid) == 1
  end
  return crawl
end

local function finish(member, outcome, reason, crawlid, domain)
  if not held[member] then return 0 end
  held[member] = nil                        -- the same task twice in one call counts once
  local function finished(field, code)
    add(pending, keys_of(crawlid).pending, domain, -1)
    add(counts, keys_of(crawlid).counts, field, 1)
    return code
  end
  if outcome == 'done' then return finished('done', 1) end
  local task = cjson.decode(member)
  local flag = flags_of(crawlid)
  local back = string.format(ARGV[8], task['spider_type'])
  if flag.paused then back = string.format(ARGV[7], crawlid) end
  if outcome == 'release' then
    if flag.stopped then return finished('purged', 4) end
    redis.call('ZADD', back, -(task['priority'] or 0), member)
    return 2
  end
  task['attempts'] = (task['attempts'] or 0) + 1
  if outcome == 'retry' and task['attempts'] < allowed then
    if flag.stopped then return finished('purged', 4) end
    redis.call('ZADD', back, -(task['priority'] or 0), cjson.encode(task))
    return 2
  end
  redis.call('HSET', string.format(ARGV[2], crawlid), task['url'],
    cjson.encode({reason = reason, attempts = task['attempts']}))
  return finished('failed', 3)
end

local codes = {}
for i = 9, #ARGV, 5 do
  codes[#codes + 1] = finish(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
end
for key, fields in pairs(pending) do
  for domain, change in pairs(fields) do
    if redis.call('HINCRBY', key, domain, change) <= 0 then redis.call('HDEL', key, domain) end
  end
end
for key, fields in pairs(counts) do
  for field, count in pairs(fields) do redis.call('HINCRBY', key, field, count) end
end
return codes
