-- Delete a job's queue for a domain that was blacklisted, and count its tasks as
-- dropped for their crawls. Every key is of the shard of KEYS[1].
-- KEYS[1]  the job's queue for the domain (zset of task JSON)
-- ARGV[1]  pending hash key template, string.format(template, crawlid)
-- ARGV[2]  counts hash key template, string.format(template, crawlid)
-- ARGV[3]  the domain
-- Returns: tasks dropped.
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for _, member in ipairs(members) do
  local crawlid = string.match(member, '"crawlid":"([^"]*)"')
  local pending = string.format(ARGV[1], crawlid)
  if redis.call('HINCRBY', pending, ARGV[3], -1) <= 0 then redis.call('HDEL', pending, ARGV[3]) end
  redis.call('HINCRBY', string.format(ARGV[2], crawlid), 'dropped', 1)
end
redis.call('DEL', KEYS[1])
return #members
