-- One job's take in one shard: for each of the job's domains named, take up to N tasks
-- of its queue, as many as both sliding windows allow (thesis 4.2.2: per spider type
-- and per host IP, scrapy-cluster semantics), record a hit in both windows per task, and
-- lease them to the job. A domain whose queue is empty leaves the job's domain set (the dispatcher
-- adds it again with its next task, in the same shard, atomically). Every key is of the
-- shard of KEYS[1].
-- KEYS[1]  the shard's leases (zset of task JSON, score = lease expiry)
-- KEYS[2]  the job's domains in the shard (set)
-- KEYS[3]  the shard's lease owners (hash task JSON -> job)
-- ARGV[1]  now (seconds)
-- ARGV[2]  lease expiry time
-- ARGV[3]  unique id prefix for the hits recorded
-- ARGV[4]  queue key template, string.format(template, job, domain)
-- ARGV[5]  window key template, string.format(template, kind, who, domain)
-- ARGV[6]  the job
-- ARGV[7]  its spider type
-- ARGV[8]  its host ip
-- ARGV[9..] per domain: domain, hits allowed per window by spider type, hits allowed per
--          window from the host ip, window length in milliseconds (the windows' TTL),
--          tasks wanted at most
-- Returns: {the job's domains in the shard now, then per domain named: a list of task
-- JSON; or "wait:<seconds>" while a window is full; or 0 if the queue is empty}
local now = tonumber(ARGV[1])

-- command(key, args...) in pieces small enough for unpack (an even count each).
local function batched(command, key, args)
  for start = 1, #args, 7000 do
    redis.call(command, key, unpack(args, start, math.min(start + 6999, #args)))
  end
end

local function room(window, allowed, window_s)
  if allowed <= 0 then return 0, window_s end
  redis.call('ZREMRANGEBYSCORE', window, '-inf', now - window_s)
  local used = redis.call('ZCARD', window)
  if used < allowed then return allowed - used, 0 end
  local oldest = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  return 0, math.max(tonumber(oldest[2]) + window_s - now, 0)
end

local function take(n, domain, hits, ip_hits, window_ms, wanted)
  local queue = string.format(ARGV[4], ARGV[6], domain)
  if redis.call('ZCARD', queue) == 0 then
    redis.call('SREM', KEYS[2], domain)
    return 0
  end
  local window_s = window_ms / 1000
  local by_type = string.format(ARGV[5], 'type', ARGV[7], domain)
  local by_ip = string.format(ARGV[5], 'ip', ARGV[8], domain)
  local type_room, type_wait = room(by_type, hits, window_s)
  local ip_room, ip_wait = room(by_ip, ip_hits, window_s)
  local count = math.min(wanted, type_room, ip_room)
  if count <= 0 then return 'wait:' .. string.format('%.3f', math.max(type_wait, ip_wait)) end
  local popped = redis.call('ZPOPMIN', queue, count)
  -- One command per key for all the tasks taken: hits in both windows, leases, owners.
  local recorded, leases, owners, tasks = {}, {}, {}, {}
  for i = 1, #popped, 2 do
    local hit = ARGV[3] .. '.' .. n .. ':' .. i
    recorded[#recorded + 1] = ARGV[1]
    recorded[#recorded + 1] = hit
    leases[#leases + 1] = ARGV[2]
    leases[#leases + 1] = popped[i]
    owners[#owners + 1] = popped[i]
    owners[#owners + 1] = ARGV[6]
    tasks[#tasks + 1] = popped[i]
  end
  batched('ZADD', by_type, recorded)
  batched('ZADD', by_ip, recorded)
  batched('ZADD', KEYS[1], leases)
  batched('HSET', KEYS[3], owners)
  redis.call('PEXPIRE', by_type, window_ms)
  redis.call('PEXPIRE', by_ip, window_ms)
  return tasks
end

local replies = {}
for i = 9, #ARGV, 5 do
  replies[#replies + 1] = take(i, ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
                               tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]))
end
table.insert(replies, 1, redis.call('SMEMBERS', KEYS[2]))
return replies
