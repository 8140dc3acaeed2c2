-- Record pages a series of crawls fetched: each page's state and when it was fetched;
-- past the bound, the pages fetched longest ago are forgotten; both keys live on for the
-- retention from this write.
-- KEYS[1]  the series' pages (hash canonical URL -> JSON state)
-- KEYS[2]  the series' fetch times (zset canonical URL -> when fetched)
-- ARGV[1]  the most pages kept
-- ARGV[2]  seconds both keys live after this write
-- ARGV[3..] triples: canonical URL, JSON state, when fetched (seconds)
-- Returns: pages forgotten past the bound.
for i = 3, #ARGV, 3 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i])
end
local forgotten = 0
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[1])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #oldest, 2 do
    forgotten = forgotten + redis.call('HDEL', KEYS[1], oldest[i])
  end
end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
redis.call('EXPIRE', KEYS[2], math.ceil(tonumber(ARGV[2])))
return forgotten
