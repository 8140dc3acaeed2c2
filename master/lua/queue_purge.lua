-- Take one crawl's tasks out of one sorted set of a shard (a pool, a job's domain queue,
-- the hubs), a slice at a time so a huge queue never blocks Redis for long: removed for
-- good (stop, expire) or parked in the crawl's parked set (pause). KEYS are of one shard.
-- KEYS[1]  the sorted set of task JSON
-- KEYS[2]  the crawl's pending hash (domain -> tasks)
-- KEYS[3]  the crawl's counts hash
-- KEYS[4]  the crawl's parked set (zset of task JSON)
-- ARGV[1]  crawl id
-- ARGV[2]  ZSCAN cursor ("0" to start)
-- ARGV[3]  ZSCAN COUNT hint
-- ARGV[4]  "purge": pending tasks removed; "purge-schedule": hub schedules removed;
--          "park": tasks moved to the parked set, still pending
-- Returns: {next cursor ("0" when done), tasks taken out}
local reply = redis.call('ZSCAN', KEYS[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local needle = '"crawlid":"' .. ARGV[1] .. '"'
local taken = 0
for i = 1, #reply[2], 2 do
  local member = reply[2][i]
  if string.find(member, needle, 1, true) and redis.call('ZREM', KEYS[1], member) == 1 then
    taken = taken + 1
    if ARGV[4] == 'park' then
      redis.call('ZADD', KEYS[4], reply[2][i + 1], member)
    elseif ARGV[4] == 'purge' then
      local domain = string.match(member, '"domain":"([^"]*)"')
      if redis.call('HINCRBY', KEYS[2], domain, -1) <= 0 then redis.call('HDEL', KEYS[2], domain) end
    end
  end
end
if taken > 0 and ARGV[4] == 'purge' then redis.call('HINCRBY', KEYS[3], 'purged', taken) end
return {reply[1], taken}
