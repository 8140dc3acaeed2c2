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
local moved = 0
for i = 1, #popped, 2 do
  local member, score = popped[i], popped[i + 1]
  local domain = cjson.decode(member)['domain']
  local job = ARGV[5 + moved]
  redis.call('ZADD', string.format(ARGV[1], job, domain), score, member)
  redis.call('SADD', string.format(ARGV[2], job), domain)
  moved = moved + 1
end
local total = redis.call('INCRBY', KEYS[2], moved)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {moved, total}
