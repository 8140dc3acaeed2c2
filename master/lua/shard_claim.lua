-- A dispatcher takes, keeps or gives back one shard: only the holder dispatches the
-- shard's pool (dispatch.lua checks), so several masters share the shards. A holder that
-- is no longer among the live dispatchers (its beat older than the lease) loses the shard
-- to the first live one that claims it. Holding costs nothing while nobody joins or
-- leaves: the owner key has no TTL to renew.
-- KEYS[1]  the shard's owner (string: the holder's instance id)
-- ARGV[1]  this dispatcher's instance id
-- ARGV[2]  "hold" (take it if free or its holder is gone, keep it if held) or "release"
--          (give it back if held: to its heir if named, so it is never left free while
--          the heir has not looked yet)
-- ARGV[3]  hold: the first of the live dispatchers' instance ids (ARGV[3..] all of
--          them); release: the heir, the live dispatcher that ranks first for it, if any
-- Returns: 1 if the caller holds the shard now, else 0.
local owner = redis.call('GET', KEYS[1])
if ARGV[2] == 'release' then
  if owner == ARGV[1] then
    if ARGV[3] then redis.call('SET', KEYS[1], ARGV[3]) else redis.call('DEL', KEYS[1]) end
  end
  return 0
end
if owner == ARGV[1] then return 1 end
if owner then
  for i = 3, #ARGV do
    if ARGV[i] == owner then return 0 end
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
