-- Take up to N tasks of one job's domain queue, as many as both sliding windows allow
-- (thesis 4.2.2: per spider type and per host IP, scrapy-cluster semantics), record a
-- hit in both windows per task, and lease them. Nothing changes when the queue is
-- empty or a window is full.
-- KEYS[1]  the job's queue for the domain (zset of task JSON, score -priority)
-- KEYS[2]  window of (spider type, domain) (zset of hit times)
-- KEYS[3]  window of (host ip, domain) (zset of hit times)
-- KEYS[4]  leases (zset of task JSON, score = lease expiry)
-- ARGV[1]  now (seconds)
-- ARGV[2]  window start = now - window; hits at or before it no longer count
-- ARGV[3]  hits allowed per window for the spider type
-- ARGV[4]  hits allowed per window for the host ip
-- ARGV[5]  window length in milliseconds (the windows' TTL)
-- ARGV[6]  lease expiry time
-- ARGV[7]  unique id prefix for the hits recorded
-- ARGV[8]  tasks wanted at most
-- Returns: a list of task JSON; or "wait:<seconds>" while a window is full; or nil if
-- the queue is empty.
local now, window_s = tonumber(ARGV[1]), tonumber(ARGV[5]) / 1000
local function room(window, allowed)
  allowed = tonumber(allowed)
  if allowed <= 0 then return 0, window_s end
  redis.call('ZREMRANGEBYSCORE', window, '-inf', ARGV[2])
  local used = redis.call('ZCARD', window)
  if used < allowed then return allowed - used, 0 end
  local oldest = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  return 0, math.max(tonumber(oldest[2]) + window_s - now, 0)
end
if redis.call('ZCARD', KEYS[1]) == 0 then return nil end
local type_room, type_wait = room(KEYS[2], ARGV[3])
local ip_room, ip_wait = room(KEYS[3], ARGV[4])
local n = math.min(tonumber(ARGV[8]), type_room, ip_room)
if n <= 0 then return 'wait:' .. string.format('%.3f', math.max(type_wait, ip_wait)) end
local popped = redis.call('ZPOPMIN', KEYS[1], n)
local tasks = {}
for i = 1, #popped, 2 do
  local hit = ARGV[7] .. ':' .. i
  redis.call('ZADD', KEYS[2], ARGV[1], hit)
  redis.call('ZADD', KEYS[3], ARGV[1], hit)
  redis.call('ZADD', KEYS[4], ARGV[6], popped[i])
  tasks[#tasks + 1] = popped[i]
end
for i = 2, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return tasks
