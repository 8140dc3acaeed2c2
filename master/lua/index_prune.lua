-- Remove members of an index (a zset member -> when last marked) that were last marked
-- at or before a cutoff: a shard index entry seen empty, a job gone silent. A member
-- marked again after the cutoff (new work, a new heartbeat) stays.
-- KEYS[1]  the index (zset, score = when the member was last marked)
-- ARGV[1]  the cutoff (seconds)
-- ARGV[2..] the members to remove if not marked since
-- Returns: members removed.
local removed = 0
for i = 2, #ARGV do
  local marked = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if marked and tonumber(marked) <= tonumber(ARGV[1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
