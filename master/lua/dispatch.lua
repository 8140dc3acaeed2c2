-- Move up to N tasks from one shard's pool into job queues, the i-th task to the i-th
-- job of the weighted-round-robin order the dispatcher computed (thesis 4.2.1), if the
-- caller holds the shard's lease (one dispatcher per shard at a time). Atomic: a task is
-- in the pool or in one queue. Queue keys are built here from templates (the task names
-- its domain); they are of the shard of KEYS[1]. A job that left the registry since the
-- caller read it (closed in this shard: requeue_job.lua) gets nothing: its task stays in
-- the pool.
-- KEYS[1]  the shard's pool of one spider type (zset of task JSON, score -priority)
-- KEYS[2]  the shard's owner (string: the dispatcher holding its lease)
-- KEYS[3]  the shard's closed jobs (zset job -> when it closed)
-- ARGV[1]  this dispatcher's instance id
-- ARGV[2]  queue key template, string.format(template, job, domain)
-- ARGV[3]  job-domains set key template, string.format(template, job)
-- ARGV[4]  tasks to move at most
-- ARGV[5..] job ids in dispatch order, at least ARGV[4] of them
-- Returns: {tasks taken from the pool, closed job ids...} (the i-th task taken went to the
-- i-th job unless that job is listed closed), or -1 if the caller does not hold the
-- shard's lease.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[4]))
local queues, order = {}, {}      -- queue key -> {score, member, ...}, in first-seen order
local domains = {}                -- job-domains key -> {domain = true}
local closed, closed_list = {}, {}  -- job -> true if it left; the ones that did
if #popped > 0 and redis.call('ZCARD', KEYS[3]) > 0 then
  local jobs, seen = {}, {}
  for n = 5, math.min(#ARGV, 4 + #popped / 2) do
    if not seen[ARGV[n]] then seen[ARGV[n]] = true; jobs[#jobs + 1] = ARGV[n] end
  end
  local when = redis.call('ZMSCORE', KEYS[3], unpack(jobs))
  for n, job in ipairs(jobs) do
    if when[n] then closed[job] = true; closed_list[#closed_list + 1] = job end
  end
end
local returned = {}               -- {score, member, ...} going back to the pool
local taken = 0
for i = 1, #popped, 2 do
  local member = popped[i]
  local job = ARGV[5 + taken]
  taken = taken + 1
  if closed[job] then
    returned[#returned + 1] = popped[i + 1]
    returned[#returned + 1] = member
  else
    -- Tasks are canonical JSON; reading the one field beats decoding the whole task.
    local domain = string.match(member, '"domain":"([^"]*)"') or cjson.decode(member)['domain']
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
  end
end
for _, queue in ipairs(order) do
  local entries = queues[queue]
  for start = 1, #entries, 7000 do
    redis.call('ZADD', queue, unpack(entries, start, math.min(start + 6999, #entries)))
  end
end
for start = 1, #returned, 7000 do
  redis.call('ZADD', KEYS[1], unpack(returned, start, math.min(start + 6999, #returned)))
end
for set, names in pairs(domains) do
  for domain in pairs(names) do redis.call('SADD', set, domain) end
end
local reply = {taken}
for _, job in ipairs(closed_list) do reply[#reply + 1] = job end
return reply
