-- Remove one crawl's tasks from one sorted set (seeds, a job's domain queue, hubs),
-- a slice at a time so a huge queue never blocks Redis for long: stop and expire.
-- KEYS[1]  the sorted set of task JSON
-- KEYS[2]  the crawl's pending hash (domain -> tasks)
-- KEYS[3]  the crawl's counts hash
-- ARGV[1]  crawl id
-- ARGV[2]  ZSCAN cursor ("0" to start)
-- ARGV[3]  ZSCAN COUNT hint
-- ARGV[4]  "1" if the set holds pending tasks (not hub schedules)
-- Returns: {next cursor ("0" when done), tasks removed}
local reply = redis.call('ZSCAN', KEYS[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local needle = '"crawlid":"' .. ARGV[1] .. '"'
local removed = 0
for i = 1, #reply[2], 2 do
  local member = reply[2][i]
  if string.find(member, needle, 1, true) and redis.call('ZREM', KEYS[1], member) == 1 then
    removed = removed + 1
    if ARGV[4] == '1' then
      local domain = string.match(member, '"domain":"([^"]*)"')
      if redis.call('HINCRBY', KEYS[2], domain, -1) <= 0 then redis.call('HDEL', KEYS[2], domain) end
    end
  end
end
if removed > 0 and ARGV[4] == '1' then redis.call('HINCRBY', KEYS[3], 'purged', removed) end
return {reply[1], removed}
