-- Move up to N tasks from one shard's pool into job queues, the i-th task to the i-th
-- job of the weighted-round-robin order the dispatcher computed (thesis 4.2.1), if the
-- caller holds the shard's lease (one dispatcher per shard at a time). Atomic: a task is
-- in the pool or in one queue. Queue keys are built here from templates (the task names
-- its domain); they are of the shard of KEYS[1].
-- KEYS[1]  the shard's pool of one spider type (zset of task JSON, score -priority)
-- KEYS[2]  the shard's owner (string: the dispatcher holding its lease)
-- ARGV[1]  this dispatcher's instance id
-- ARGV[2]  queue key template, string.format(template, job, domain)
-- ARGV[3]  job-domains set key template, string.format(template, job)
-- ARGV[4]  tasks to move at most
-- ARGV[5..] job ids in dispatch order, at least ARGV[4] of them
-- Returns: tasks moved, or -1 if the caller does not hold the shard's lease.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[4]))
local queues, order = {}, {}      -- queue key -> {score, member, ...}, in first-seen order
local domains = {}                -- job-domains key -> {domain = true}
local moved = 0
for i = 1, #popped, 2 do
  local member = popped[i]
  -- Tasks are canonical JSON; reading the one field beats decoding the whole task.
  local domain = string.match(member, '"domain":"([^"]*)"') or cjson.decode(member)['domain']
  local job = ARGV[5 + moved]
  local queue = string.format(ARGV[2], job, domain)
  if not queues[queue] then
    queues[queue] = {}
    order[#order + 1] = queue
    local set = string.format(ARGV[3], job)
    domains[set] = domains[set] or {}
    domains[set][domain] = true
  end
  local entries = queues[queue]
  entries[#entries + 1] = popped[i + 1]
  entries[#entries + 1] = member
  moved = moved + 1
end
for _, queue in ipairs(order) do
  local entries = queues[queue]
  for start = 1, #entries, 7000 do
    redis.call('ZADD', queue, unpack(entries, start, math.min(start + 6999, #entries)))
  end
end
for set, names in pairs(domains) do
  for domain in pairs(names) do redis.call('SADD', set, domain) end
end
return moved
