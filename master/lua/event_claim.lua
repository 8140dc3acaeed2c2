-- Claim a crawl event once, however many monitors see it: the claim key is set only if
-- absent, and the event goes into the outbox (to be sent) in the same step, so a claimed
-- event is never lost and an unclaimed one never sent.
-- KEYS[1]  the event's claim key (string)
-- KEYS[2]  the event outbox (zset of event JSON -> when due)
-- ARGV[1]  now (seconds)
-- ARGV[2]  seconds the claim lives
-- ARGV[3]  the event JSON
-- Returns: 1 if this call claimed it, 0 if it was claimed before.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
return 1
