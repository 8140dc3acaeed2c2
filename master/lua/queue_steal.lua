-- An idle job takes a share of the backlog another job of its spider type was given, in
-- one shard: of the other jobs' domain queues there (a random sample of each job's
-- domains), the longest gives up to half its tasks, the lowest-priority ones, to the idle
-- job's queue for that domain. Atomic: a task is in exactly one queue. The throttles are
-- per (spider type, domain) and (host ip, domain), so which job holds a task does not
-- change how fast its domain is fetched. Every key is of the shard of KEYS[1].
-- KEYS[1]  the idle job's domains in the shard (set)
-- ARGV[1]  queue key template, string.format(template, job, domain)
-- ARGV[2]  job-domains set key template, string.format(template, job)
-- ARGV[3]  the idle job
-- ARGV[4]  tasks to move at most
-- ARGV[5]  domains to look at per other job at most
-- ARGV[6..] the other live jobs of the idle job's spider type
-- Returns: tasks moved
local longest, longest_domain, longest_size = nil, nil, 1
for i = 6, #ARGV do
  local domains = redis.call('SRANDMEMBER', string.format(ARGV[2], ARGV[i]), tonumber(ARGV[5]))
  for _, domain in ipairs(domains) do
    local queue = string.format(ARGV[1], ARGV[i], domain)
    local size = redis.call('ZCARD', queue)
    if size > longest_size then
      longest, longest_domain, longest_size = queue, domain, size
    end
  end
end
if not longest then return 0 end
local popped = redis.call('ZPOPMAX', longest, math.min(math.floor(longest_size / 2),
                                                       tonumber(ARGV[4])))
local entries = {}
for i = 1, #popped, 2 do
  entries[#entries + 1] = popped[i + 1]      -- score
  entries[#entries + 1] = popped[i]          -- task
end
redis.call('ZADD', string.format(ARGV[1], ARGV[3], longest_domain), unpack(entries))
redis.call('SADD', KEYS[1], longest_domain)
return #popped / 2
