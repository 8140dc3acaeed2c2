-- Move up to N tasks from seeds into job queues, the i-th task to the i-th job of
-- the weighted-round-robin order the dispatcher computed (thesis 4.2.1), and count
-- them against the dispatch window. Atomic: a task is in seeds or in one queue.
-- Queue keys are built here from templates (the task names its domain); they share
-- the frontier's hash tag, so this also runs on Redis Cluster.
-- KEYS[1]  seeds (zset of task JSON, score -priority)
-- KEYS[2]  tasks dispatched in the current window (string counter)
-- ARGV[1]  queue key template, string.format(template, job, domain)
-- ARGV[2]  job-domains set key template, string.format(template, job)
-- ARGV[3]  tasks to move at most
-- ARGV[4]  TTL of the window counter (seconds)
-- ARGV[5..] job ids in dispatch order, at least ARGV[3] of them
-- Returns: {tasks moved, tasks dispatched in the window so far}
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[3]))
local queues, order = {}, {}      -- queue key -> {score, member, ...}, in first-seen order
local domains = {}                -- job-domains key -> {domain = true}
local moved = 0
for i = 1, #popped, 2 do
  local member = popped[i]
  -- Tasks are canonical JSON; reading the one field beats decoding the whole task.
  local domain = string.match(member, '"domain":"([^"]*)"') or cjson.decode(member)['domain']
  local job = ARGV[5 + moved]
  local queue = string.format(ARGV[1], job, domain)
  if not queues[queue] then
    queues[queue] = {}
    order[#order + 1] = queue
    local set = string.format(ARGV[2], job)
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
local total = redis.call('INCRBY', KEYS[2], moved)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {moved, total}
