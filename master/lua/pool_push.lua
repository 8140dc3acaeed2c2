-- Put new tasks of one spider type in one shard's pool, waiting for the dispatcher, and
-- count them as pending for their crawl and domain (the counts `info` answers from). A
-- task of a stopped crawl is not queued; one of a paused crawl is parked (pending, not
-- dispatched) until the crawl resumes. A task with a digest (a spider's new link: its
-- crawl and URL) pushed to the shard within the dedupe window already is not queued
-- again: two jobs that both found the link new, or a push retried after a failed round,
-- queue it once. Every key is of the shard of KEYS[1]. Digests and pool entries are looked
-- up and written in one command per key (a lone one by adding it: ZADD says whether it was
-- there; a task with a digest, made from a link just now, is not looked up), and the
-- counts added once per crawl and domain.
-- KEYS[1]  the shard's pool of the spider type (zset of task JSON, score -priority)
-- KEYS[2]  the shard's recently pushed link digests (zset, score = when pushed)
-- ARGV[1]  pending hash key template, string.format(template, crawlid)
-- ARGV[2]  counts hash key template, string.format(template, crawlid)
-- ARGV[3]  the shard's stopped crawls (hash crawl id -> when)
-- ARGV[4]  the shard's paused crawls (hash crawl id -> when)
-- ARGV[5]  parked set key template, string.format(template, crawlid)
-- ARGV[6]  now (seconds)
-- ARGV[7]  dedupe window (seconds)
-- ARGV[8..] per task: score, task JSON, digest ("" for none: a seed, a hub), its crawl id,
--          its domain
-- Returns: one letter per task: "q" queued (or parked), "s" refused because its crawl is
-- stopped, "r" pushed within the window already, "d" in the pool already as it is.
local now, window = tonumber(ARGV[6]), tonumber(ARGV[7])

-- command(key, args...) in pieces small enough for unpack.
local function batched(command, key, args, ...)
  local options = {...}
  for start = 1, #args, 7000 do
    local piece = {unpack(options)}
    for n = start, math.min(start + 6999, #args) do piece[#piece + 1] = args[n] end
    redis.call(command, key, unpack(piece))
  end
end

-- ZMSCORE of many members: found[member] = true for those in the zset.
local function present(key, members)
  local found = {}
  for start = 1, #members, 7000 do
    local scores = redis.call('ZMSCORE', key,
                              unpack(members, start, math.min(start + 6999, #members)))
    for n, score in ipairs(scores) do
      if score then found[members[start + n - 1]] = true end
    end
  end
  return found
end

local tasks, crawls = {}, {}                 -- per task {crawlid, domain, ...}; per crawl
for i = 8, #ARGV, 5 do
  local crawlid = ARGV[i + 3]
  if crawls[crawlid] == nil then
    crawls[crawlid] = {stopped = redis.call('HEXISTS', ARGV[3], crawlid) == 1,
                       parked = redis.call('HEXISTS', ARGV[4], crawlid) == 1,
                       pending = string.format(ARGV[1], crawlid),
                       counts = string.format(ARGV[2], crawlid)}
  end
  tasks[#tasks + 1] = {crawlid = crawlid, domain = ARGV[i + 4], score = ARGV[i],
                       member = ARGV[i + 1], digest = ARGV[i + 2]}
end

-- Links pushed within the window already: refused ("r").
local digests = {}
for _, task in ipairs(tasks) do
  if not crawls[task.crawlid].stopped and task.digest ~= '' then
    digests[#digests + 1] = task.digest
  end
end
local recent = {}
local one_digest_added = false              -- a lone digest is looked up by adding it
if #digests == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZADD', KEYS[2], 'NX', now, digests[1]) == 0 then
    recent[digests[1]] = true
  else
    one_digest_added = true
  end
elseif #digests > 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  recent = present(KEYS[2], digests)
end

-- The rest go to the pool (or a paused crawl's parked set): "q" if new there, "d" if not.
local targets, order = {}, {}                -- key -> {members, entries}; keys in order
local codes, fresh_digests = {}, {}
for n, task in ipairs(tasks) do
  if crawls[task.crawlid].stopped then
    codes[n] = 's'
  elseif task.digest ~= '' and recent[task.digest] then
    codes[n] = 'r'
  else
    if task.digest ~= '' then
      recent[task.digest] = true             -- the same link twice in one call: once
      fresh_digests[#fresh_digests + 1] = now
      fresh_digests[#fresh_digests + 1] = task.digest
    end
    local key = KEYS[1]
    if crawls[task.crawlid].parked then key = string.format(ARGV[5], task.crawlid) end
    if not targets[key] then
      targets[key] = {members = {}, entries = {}}
      order[#order + 1] = key
    end
    local target = targets[key]
    -- A link's task (one with a digest) was just made, with a fresh id: only its link
    -- can repeat, and the digests catch that. Other tasks may be in the pool already.
    if task.digest == '' then target.members[#target.members + 1] = task.member end
    target.entries[#target.entries + 1] = task.score
    target.entries[#target.entries + 1] = task.member
    task.target = key
  end
end
if not one_digest_added then batched('ZADD', KEYS[2], fresh_digests, 'NX') end

local pending, queued = {}, {}               -- totals by key and field
for _, key in ipairs(order) do
  local target = targets[key]
  if #target.entries == 2 and #target.members == 1 then   -- ZADD answers if it was there
    target.there = {}
    if redis.call('ZADD', key, unpack(target.entries)) == 0 then
      target.there[target.members[1]] = true
    end
  else
    target.there = present(key, target.members)
    batched('ZADD', key, target.entries)
  end
end
for n, task in ipairs(tasks) do
  if not codes[n] then
    local target = targets[task.target]
    if target.there[task.member] then
      codes[n] = 'd'
    else
      target.there[task.member] = true       -- the same task twice in one call: once
      codes[n] = 'q'
      local counts, domains = crawls[task.crawlid].counts, crawls[task.crawlid].pending
      pending[domains] = pending[domains] or {}
      pending[domains][task.domain] = (pending[domains][task.domain] or 0) + 1
      queued[counts] = (queued[counts] or 0) + 1
    end
  end
end
for key, fields in pairs(pending) do
  for domain, count in pairs(fields) do redis.call('HINCRBY', key, domain, count) end
end
for key, count in pairs(queued) do redis.call('HINCRBY', key, 'queued', count) end
-- A shard no spider pushes to any more keeps no digests beyond the window.
if #digests > 0 then redis.call('EXPIRE', KEYS[2], math.ceil(window) + 1) end
return table.concat(codes)
