-- Put new tasks of one spider type in one shard's pool, waiting for the dispatcher, and
-- count them as pending for their crawl and domain (the counts `info` answers from). A
-- task of a stopped crawl is not queued; one of a paused crawl is parked (pending, not
-- dispatched) until the crawl resumes. A task with a digest (a spider's new link: its
-- crawl and canonical URL; an intake's seed: its task id) pushed to the shard within the
-- dedupe window already is not queued again: two jobs that both found the link new, a push
-- retried after a failed round, or staged seeds applied again, queue it once. Every key is
-- of the shard of KEYS[1]. Digests and pool entries are looked up and written in one
-- command per key (a lone one by adding it: ZADD says whether it was there; a task with a
-- digest is not looked up in the pool: its digest catches a repeat), and the counts added
-- once per crawl and domain.
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
local FIRST, STEP = 8, 5

-- ZADD key [option] args... in pieces small enough for unpack.
local function zadd(key, option, args)
  for start = 1, #args, 7000 do
    local last = math.min(start + 6999, #args)
    if option then
      redis.call('ZADD', key, option, unpack(args, start, last))
    else
      redis.call('ZADD', key, unpack(args, start, last))
    end
  end
end

-- ZMSCORE of many members: found[member] = true for those in the zset.
local function present(key, members, found)
  for start = 1, #members, 7000 do
    local scores = redis.call('ZMSCORE', key,
                              unpack(members, start, math.min(start + 6999, #members)))
    for n, score in ipairs(scores) do
      if score then found[members[start + n - 1]] = true end
    end
  end
  return found
end

local crawls = {}                            -- crawl id -> its flags and keys
local digests = {}                           -- of tasks whose crawl is not stopped
for i = FIRST, #ARGV, STEP do
  local crawlid = ARGV[i + 3]
  local crawl = crawls[crawlid]
  if crawl == nil then
    crawl = {stopped = redis.call('HEXISTS', ARGV[3], crawlid) == 1,
             target = KEYS[1],                -- the pool, or the crawl's parked set
             pending = string.format(ARGV[1], crawlid), counts = string.format(ARGV[2], crawlid),
             domains = {}, queued = 0}          -- pending counts added by domain, and in all
    if redis.call('HEXISTS', ARGV[4], crawlid) == 1 then
      crawl.target = string.format(ARGV[5], crawlid)
    end
    crawls[crawlid] = crawl
  end
  if not crawl.stopped and ARGV[i + 2] ~= '' then digests[#digests + 1] = ARGV[i + 2] end
end

-- Links pushed within the window already: refused ("r").
local recent = {}
local one_digest_added = false              -- a lone digest is looked up by adding it
if #digests > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if #digests == 1 then
    if redis.call('ZADD', KEYS[2], 'NX', now, digests[1]) == 0 then
      recent[digests[1]] = true
    else
      one_digest_added = true
    end
  else
    present(KEYS[2], digests, recent)
  end
end

-- The rest go to the pool (or a paused crawl's parked set): "q" if new there, "d" if not.
local codes, fresh_digests = {}, {}
local targets, order = {}, {}                -- key -> {members, entries}; keys in order
for i = FIRST, #ARGV, STEP do
  local digest, crawl = ARGV[i + 2], crawls[ARGV[i + 3]]
  local n = #codes + 1
  if crawl.stopped then
    codes[n] = 's'
  elseif digest ~= '' and recent[digest] then
    codes[n] = 'r'
  else
    codes[n] = false
    if digest ~= '' then
      recent[digest] = true                  -- the same link twice in one call: once
      fresh_digests[#fresh_digests + 1] = now
      fresh_digests[#fresh_digests + 1] = digest
    end
    local key = crawl.target
    local target = targets[key]
    if not target then
      target = {members = {}, entries = {}, there = {}}
      targets[key] = target
      order[#order + 1] = key
    end
    -- A link's task (one with a digest) was just made, with a fresh id: only its link
    -- can repeat, and the digests catch that. Other tasks may be in the pool already.
    if digest == '' then target.members[#target.members + 1] = ARGV[i + 1] end
    target.entries[#target.entries + 1] = ARGV[i]
    target.entries[#target.entries + 1] = ARGV[i + 1]
  end
end
if not one_digest_added and #fresh_digests > 0 then zadd(KEYS[2], 'NX', fresh_digests) end

for _, key in ipairs(order) do
  local target = targets[key]
  if #target.entries == 2 and #target.members == 1 then   -- ZADD answers if it was there
    if redis.call('ZADD', key, unpack(target.entries)) == 0 then
      target.there[target.members[1]] = true
    end
  else
    present(key, target.members, target.there)
    zadd(key, nil, target.entries)
  end
end
local n = 0
for i = FIRST, #ARGV, STEP do
  n = n + 1
  if codes[n] == false then
    local crawl = crawls[ARGV[i + 3]]
    local there = targets[crawl.target].there
    if there[ARGV[i + 1]] then
      codes[n] = 'd'
    else
      there[ARGV[i + 1]] = true              -- the same task twice in one call: once
      codes[n] = 'q'
      crawl.domains[ARGV[i + 4]] = (crawl.domains[ARGV[i + 4]] or 0) + 1
      crawl.queued = crawl.queued + 1
    end
  end
end
for _, crawl in pairs(crawls) do
  for domain, count in pairs(crawl.domains) do
    redis.call('HINCRBY', crawl.pending, domain, count)
  end
  if crawl.queued > 0 then redis.call('HINCRBY', crawl.counts, 'queued', crawl.queued) end
end
-- A shard no spider pushes to any more keeps no digests beyond the window.
if #digests > 0 then redis.call('EXPIRE', KEYS[2], math.ceil(window) + 1) end
return table.concat(codes)
