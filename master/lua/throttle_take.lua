-- Take the next task of one job's domain queue if both sliding windows allow a hit
-- (thesis 4.2.2: per spider type and per host IP, scrapy-cluster semantics), record
-- the hit in both, and lease the task. Nothing changes when the queue is empty or a
-- window is full.
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
-- ARGV[7]  unique id for this hit
-- Returns: the task JSON; or "wait:<seconds>" while a window is full; or nil if empty.
local now = tonumber(ARGV[1])
local function room(window, allowed)
  if tonumber(allowed) <= 0 then return tonumber(ARGV[5]) / 1000 end
  redis.call('ZREMRANGEBYSCORE', window, '-inf', ARGV[2])
  if redis.call('ZCARD', window) < tonumber(allowed) then return nil end
  local oldest = redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')
  return tonumber(oldest[2]) + tonumber(ARGV[5]) / 1000 - now
end
if redis.call('ZCARD', KEYS[1]) == 0 then return nil end
local wait = room(KEYS[2], ARGV[3]) or room(KEYS[3], ARGV[4])
if wait then return 'wait:' .. string.format('%.3f', math.max(wait, 0)) end
local popped = redis.call('ZPOPMIN', KEYS[1])
for i = 2, 3 do
  redis.call('ZADD', KEYS[i], ARGV[1], ARGV[7])
  redis.call('PEXPIRE', KEYS[i], ARGV[5])
end
redis.call('ZADD', KEYS[4], ARGV[6], popped[1])
return popped[1]
